"""Wire models of the OpenAI requests the gateway accepts.

Invariant: a model instance that validated is safe to act on: roles, types and ranges are
checked here, and every failure becomes a 400 `ApiError` naming the offending `param`
with OpenAI's code for it (`validate()`, `validation_errors.py`), never a 500; so is
`max_tokens` beside `max_completion_tokens`, as at OpenAI, and a `logit_bias` whose keys
name one token twice ("5" and "05"). Chat and legacy completions type `metadata` alike
(its bounds: `request_metadata`). Cross-field rules that need the
model or the tools (context length, tool-call ids, tool schemas) live in `chat_checks.py`.
Unknown fields are kept (`extra="allow"`) so upstream models can receive them; declared
hints a local model ignores (`store`, `reasoning_effort`, ...) are typed only so a wrong
type is a 400 here, and reach upstream models as sent like any field. A client
`cache_salt` is accepted and ignored: the tenant alone salts the cache; `stepahead_replay`
(`ReplayStep`) is the replay harness's, for the tracer only.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from gateway.chat_messages import Message
from gateway.errors import invalid_request
from gateway.validation_errors import openai_validation_error

_ALLOW = ConfigDict(extra="allow", strict=True)


# OpenAI's: a name with a dot or a space, or over 64 characters, is a 400 there, so it is here
TOOL_NAME_PATTERN = r"^[a-zA-Z0-9_-]{1,64}$"
MAX_TOOLS = 128   # OpenAI's most tools in one request


class FunctionDef(BaseModel):
    model_config = _ALLOW
    name: Annotated[str, Field(pattern=TOOL_NAME_PATTERN)]
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(BaseModel):
    model_config = _ALLOW
    type: Literal["function"]
    function: FunctionDef


class NamedFunction(BaseModel):
    name: str


class NamedToolChoice(BaseModel):
    type: Literal["function"]
    function: NamedFunction


class StreamOptions(BaseModel):
    model_config = _ALLOW
    include_usage: bool | None = None


StopField = str | Annotated[list[str], Field(max_length=4)] | None
Temperature = Annotated[float, Field(ge=0.0, le=2.0)] | None
TopP = Annotated[float, Field(ge=0.0, le=1.0)] | None   # 0: the likeliest token alone, as OpenAI allows
PositiveInt = Annotated[int, Field(ge=1)] | None


Penalty = Annotated[float, Field(ge=-2.0, le=2.0)] | None
# OpenAI's tiers; a local model serves "flex" after every other tier's work
# (`shards.tiered_queue`) and the others as "default"
ServiceTier = Literal["auto", "default", "flex", "scale", "priority"] | None
Verbosity = Literal["low", "medium", "high"]   # chat's `verbosity`, Responses' `text.verbosity`
LogitBias = dict[Annotated[str, Field(pattern=r"^[0-9]{1,12}$")], Annotated[float, Field(ge=-100.0, le=100.0)]] | None


class JsonSchemaFormat(BaseModel):
    """`response_format.json_schema`: a `name`, and the `schema` the reply must follow (a
    JSON object when given; kept among the extras, as the field name would shadow
    pydantic's, so it goes upstream as sent)."""

    model_config = _ALLOW
    name: Annotated[str, Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")]
    description: str | None = None
    strict: bool | None = None

    @model_validator(mode="after")
    def _schema_is_an_object(self) -> "JsonSchemaFormat":
        if not isinstance((self.model_extra or {}).get("schema", {}), dict):
            raise ValueError("'schema' must be a JSON Schema object")
        return self

    def schema_object(self) -> dict:
        return (self.model_extra or {}).get("schema") or {"type": "object"}


class ResponseFormat(BaseModel):
    """`{"type": "text" | "json_object" | "json_schema", ...}`; the rest goes upstream as sent."""

    model_config = _ALLOW
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    @model_validator(mode="after")
    def _json_schema_given(self) -> "ResponseFormat":
        if self.type == "json_schema" and self.json_schema is None:
            raise ValueError("'json_schema' is required when 'type' is 'json_schema'")
        return self


class TextPart(BaseModel):
    model_config = _ALLOW
    type: Literal["text"]
    text: str


class PredictedOutput(BaseModel):
    """`prediction`: the content a reply is expected to repeat (OpenAI's predicted outputs)."""

    model_config = _ALLOW
    type: Literal["content"]
    content: str | list[TextPart]


ToolName = Annotated[str, Field(min_length=1, max_length=128)]
ToolNames = Annotated[list[ToolName], Field(max_length=64)]


class ReplayStep(BaseModel):
    """stepahead's extension for replaying recorded traffic (`stepahead_replay`): what the
    recorded step followed (`after_tools`: the tools whose results it carries) and what
    its response called (`tool_calls`). A token-id replay cannot show either to the
    gateway, so the tracer takes them from here; never forwarded upstream."""

    model_config = ConfigDict(extra="forbid", strict=True)
    after_tools: ToolNames = []
    tool_calls: ToolNames = []


class _GenerationRequest(BaseModel):
    """The fields chat and legacy completions share (and `stream_options`' rule)."""

    model_config = _ALLOW
    model: str
    stream: bool = False   # null, as the reference allows, is false (`_null_stream_is_false`)
    stream_options: StreamOptions | None = None
    temperature: Temperature = None
    top_p: TopP = None
    seed: Annotated[int, Field(ge=-2**63, le=2**63 - 1)] | None = None   # a 64-bit integer, as OpenAI's
    stop: StopField = None
    n: Annotated[int, Field(ge=1, le=128)] | None = None
    user: str | None = None
    frequency_penalty: Penalty = None
    presence_penalty: Penalty = None
    logit_bias: LogitBias = None
    service_tier: ServiceTier = None
    metadata: dict[str, str] | None = None   # its bounds: request_metadata.checked_metadata
    stepahead_replay: ReplayStep | None = None

    @field_validator("stream", mode="before")
    @classmethod
    def _null_stream_is_false(cls, stream: Any) -> Any:
        return False if stream is None else stream

    @field_validator("logit_bias")
    @classmethod
    def _one_key_per_token(cls, logit_bias: dict[str, float] | None) -> dict[str, float] | None:
        """One bias a token: two keys naming one id ("5", "05") are a 400 (one would be lost)."""
        seen: dict[int, str] = {}
        for key in logit_bias or {}:
            if (first := seen.setdefault(int(key), key)) != key:
                raise invalid_request(f"Invalid 'logit_bias': the keys '{first}' and '{key}' both name token "
                                      f"{int(key)}. Give each token one key.", param="logit_bias", code="invalid_value")
        return logit_bias

    @field_validator("stream_options")
    @classmethod
    def _stream_options_need_stream(cls, options: StreamOptions | None,
                                    info: ValidationInfo) -> StreamOptions | None:
        """As OpenAI: `stream_options` is only allowed with `stream: true` (declared before it)."""
        if options is not None and not info.data.get("stream"):
            raise ValueError("stream_options is only allowed when stream is true")
        return options

    def stop_list(self) -> list[str]:
        """The stop strings a local model stops at: an empty one stops nowhere (it would end
        the reply at once, before text it had sampled), so it is left out."""
        return [stop for stop in ([self.stop] if isinstance(self.stop, str) else self.stop or []) if stop]

    def wants_stream_usage(self) -> bool:
        return bool(self.stream and self.stream_options and self.stream_options.include_usage)


class ChatCompletionRequest(_GenerationRequest):
    messages: Annotated[list[Message], Field(min_length=1)]
    max_tokens: PositiveInt = None
    max_completion_tokens: PositiveInt = None
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    logprobs: bool | None = None
    top_logprobs: Annotated[int, Field(ge=0, le=20)] | None = None
    response_format: ResponseFormat | None = None
    # hints a local model has no use for, typed as OpenAI's (any effort name: new ones appear)
    store: bool | None = None
    reasoning_effort: str | None = None
    verbosity: Verbosity | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None
    prediction: PredictedOutput | None = None

    @field_validator("tools", mode="before")
    @classmethod
    def _tools_count(cls, tools: Any) -> Any:
        """As OpenAI's chat completions: `tools` holds 1 to MAX_TOOLS tools (an empty list
        is a 400 `empty_array`, more an `array_above_max_length`), checked before each is
        (pydantic passes an `ApiError` through unchanged)."""
        if isinstance(tools, list) and not tools:
            raise invalid_request("Invalid 'tools': empty array. Expected an array with minimum length 1, but got "
                                  "an empty array instead. Leave 'tools' out for a request without tools.",
                                  param="tools", code="empty_array")
        if isinstance(tools, list) and len(tools) > MAX_TOOLS:
            raise invalid_request(f"Invalid 'tools': array too long. Expected an array with maximum length "
                                  f"{MAX_TOOLS}, but got an array with length {len(tools)} instead.", param="tools",
                                  code="array_above_max_length")
        return tools

    @field_validator("tool_choice", mode="before")
    @classmethod
    def _tool_choice_type(cls, choice: Any) -> Any:
        """Another type than "function" (`allowed_tools`, ...) is a 400 `unsupported_value`, as
        the Responses API's (`responses_chat_fields.chat_tool_choice`), not a schema error."""
        kind = choice.get("type") if isinstance(choice, dict) else None
        if isinstance(kind, str) and kind != "function":
            raise invalid_request(f"A tool_choice of type {kind!r} is not supported: only function tools, chosen by "
                                  '"auto", "none", "required" or {"type": "function", "function": {"name": "..."}}.',
                                  param="tool_choice", code="unsupported_value")
        return choice

    @model_validator(mode="after")
    def _one_completion_limit(self) -> "ChatCompletionRequest":
        """As OpenAI: `max_tokens` and `max_completion_tokens` together are a 400
        (`invalid_parameter_combination`, naming `max_tokens`), never one silently dropped."""
        if self.max_tokens is not None and self.max_completion_tokens is not None:
            raise invalid_request("Setting 'max_tokens' and 'max_completion_tokens' at the same time is not "
                                  "supported.", param="max_tokens", code="invalid_parameter_combination")
        return self

    def forces_call(self) -> bool:
        """Whether the reply must be a tool call (`tool_choice` "required" or a named function)."""
        return bool(self.tools) and (self.tool_choice == "required" or isinstance(self.tool_choice, NamedToolChoice))

    def completion_limit(self) -> int | None:
        """The one completion limit set (`_one_completion_limit`), None when neither is."""
        return self.max_completion_tokens or self.max_tokens


_TokenIds = Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)]


class CompletionRequest(_GenerationRequest):
    """Legacy completions. `prompt` is a string, a list of token ids, or a non-empty list of
    either (several prompts); every token-id list is non-empty and its ids non-negative."""

    prompt: str | _TokenIds | Annotated[list[str], Field(min_length=1)] \
        | Annotated[list[_TokenIds], Field(min_length=1)]
    max_tokens: Annotated[int, Field(ge=0)] | None = 16   # 0: with echo, the prompt alone (local: else a 400)
    echo: bool | None = None
    logprobs: Annotated[int, Field(ge=0, le=5)] | None = None
    suffix: str | None = None
    best_of: Annotated[int, Field(ge=1, le=20)] | None = None

    @field_validator("prompt", mode="before")
    @classmethod
    def _prompt_shape(cls, value: Any) -> Any:
        """One message for every malformed prompt (a union's own error names its first member)."""
        several = isinstance(value, list) and value and (all(isinstance(p, str) for p in value)
                                                         or all(_is_token_ids(p) for p in value))
        if isinstance(value, str) or _is_token_ids(value) or several:
            return value
        raise ValueError("'prompt' must be a string, a list of token ids (integers >= 0), or a non-empty "
                         "list of strings or of token-id lists")


def served_tier(service_tier: str | None) -> str:
    """"flex" for a flex request, else "default" (a local model has no faster tier)."""
    return "flex" if service_tier == "flex" else "default"


def _is_token_ids(value: Any) -> bool:
    return (isinstance(value, list) and bool(value)
            and all(type(token) is int and token >= 0 for token in value))


def refuse_extras(request: BaseModel, refused: Mapping[str, str]) -> None:
    """A 400 `unsupported_parameter` naming the first unknown field of `request` that is set
    (not null) and listed in `refused`, with its message there."""
    extra = request.model_extra or {}
    for name, message in refused.items():
        if extra.get(name) is not None:
            raise invalid_request(message, param=name, code="unsupported_parameter")


M = TypeVar("M", bound=BaseModel)


def validate(model_cls: type[M], body: Any) -> M:
    """Build `model_cls` from parsed JSON, or raise a 400 naming the first bad field, with
    OpenAI's code for it (`gateway.validation_errors`; a union field's wrong type is said
    as the model's `EXPECTED_TYPES` says what it takes, where it names the field)."""
    if not isinstance(body, dict):
        raise invalid_request("The request body must be a JSON object.")
    try:
        return model_cls.model_validate(body)
    except ValidationError as exc:
        raise openai_validation_error(exc.errors(include_url=False), body,
                                      getattr(model_cls, "EXPECTED_TYPES", None)) from None
