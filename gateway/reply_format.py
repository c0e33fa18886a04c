"""What `response_format` asks of a local model's reply, checked before anything runs.

`json_object`: the reply is a JSON object, and (as OpenAI requires, so that the model is
told) some message must mention JSON. `json_schema`: the reply is a JSON object valid
against `json_schema.schema`, which must itself be a valid JSON Schema whose root is an
object. `text` (or none): free text. Local models build the JSON per
`gateway.tool_forcing` (`forced_json`); how far a schema is steered is stated there.
"""
from __future__ import annotations

from jsonschema.exceptions import SchemaError

from gateway.errors import invalid_request
from gateway.json_schemas import SchemaRoot
from gateway.schema_checks import SchemaChecker
from gateway.schema_limits import SchemaPastLimit
from gateway.schemas import ChatCompletionRequest

ANY_OBJECT = {"type": "object"}


def _mentions_json(request: ChatCompletionRequest) -> bool:
    for message in request.messages:
        content = message.content
        parts = content if isinstance(content, list) else [content]
        for part in parts:
            text = part.get("text") if isinstance(part, dict) else part
            if isinstance(text, str) and "json" in text.lower():
                return True
    return False


def reply_schema(request: ChatCompletionRequest, tenant: str = "", schemas: SchemaChecker | None = None,
                 ) -> dict | None:
    """The JSON Schema the reply must follow, or None for free text; a 400 naming the
    parameter when the format cannot be honoured. `schemas` remembers the tenant's schemas
    that passed (a fresh checker checks every time)."""
    response_format = request.response_format
    if response_format is None or response_format.type == "text":
        return None
    if response_format.type == "json_object":
        if not _mentions_json(request):
            raise invalid_request("'messages' must contain the word 'json' in some form, to use "
                                  "'response_format' of type 'json_object'.", param="messages")
        return ANY_OBJECT
    schema = response_format.json_schema.schema_object()
    param = "response_format.json_schema.schema"
    try:
        (schemas if schemas is not None else SchemaChecker()).check(tenant, schema)   # (an empty one is falsy)
    except SchemaError as exc:
        raise invalid_request(f"Invalid JSON Schema: {exc.message}", param=param) from None
    except SchemaPastLimit as past:
        raise past.refusal(param, "invalid_request") from None
    resolved = SchemaRoot(schema).resolve(schema)   # pydantic's schema of a recursive model is a root `$ref`
    root = resolved.get("type", "object" if "properties" in resolved else None)
    if root != "object":
        raise invalid_request("The root of the schema must be of type 'object'.", param=param)
    return schema
