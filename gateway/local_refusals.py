"""OpenAI chat parameters local models cannot honour, refused by name.

The chat schema accepts fields it does not know (clients send many), and most unknown
ones are hints a local model may ignore without changing the answer (`service_tier`,
`store`, `prompt_cache_key`, `reasoning_effort` for a model that does not reason, ...).
The ones below would change what the client gets: legacy `functions` would be answered
without the tools, `audio` output or web search would silently not happen. Invariant:
each is a 400 `unsupported_parameter` naming it, before any work is queued. So is a
JSON Schema (a reply's or a tool's) with a `$ref` that does not resolve within it: local
models check what they write against the schema alone.
"""
from __future__ import annotations

from gateway.errors import invalid_request
from gateway.json_schemas import unresolvable_ref
from gateway.schemas import ChatCompletionRequest, refuse_extras

REFUSED = {
    "functions": "Legacy 'functions' are not supported by local models; send them as 'tools' "
                 "([{\"type\": \"function\", \"function\": {...}}]).",
    "function_call": "Legacy 'function_call' is not supported by local models; use 'tool_choice'.",
    "audio": "Local models reply in text only: 'audio' output is not supported.",
    "web_search_options": "Local models cannot search the web: 'web_search_options' is not supported.",
}


def refuse_unsupported_chat_params(request: ChatCompletionRequest) -> None:
    refuse_extras(request, REFUSED)
    modalities = (request.model_extra or {}).get("modalities")
    if modalities is not None and modalities != ["text"]:
        raise invalid_request("Local models reply in text only: 'modalities' must be [\"text\"].",
                              param="modalities", code="unsupported_parameter")


def refuse_unresolvable_refs(response_schema: dict | None, tools: list) -> None:
    """A 400 naming the schema whose `$ref` does not resolve within it."""
    schemas = [("response_format.json_schema.schema", response_schema)] + [
        (f"tools[{index}].function.parameters", tool.function.parameters) for index, tool in enumerate(tools)]
    for param, schema in schemas:
        ref = unresolvable_ref(schema) if isinstance(schema, dict) else None
        if ref is not None:
            raise invalid_request(f"The JSON Schema's reference '{ref}' does not resolve within it: local "
                                  "models support only local references ('#/$defs/...').", param=param,
                                  code="unsupported_parameter")
