"""The Responses API (`POST /v1/responses`) in terms of chat completions.

A Responses request becomes a chat request: `instructions` the first system message,
`input` (a string, or message / function_call / function_call_output items) the
messages after the stored conversation of `previous_response_id`, flat function tools
the chat's nested ones, `text.format` the `response_format`, `max_output_tokens` the
`max_completion_tokens`, `include: ["message.output_text.logprobs"]` and `top_logprobs`
chat's `logprobs` and `top_logprobs`. The chat request then runs like any other (the same
backends, prefix cache, traces and limits), and its reply is rendered as a response
object: one `message` item for the text (its `output_text` part with the tokens' log
probabilities when asked, else an empty list), one `function_call` item per tool call
(gateway/responses_objects.py).

Invariant: only what chat completions can express is accepted; anything else (built-in
tools, image or file inputs for text models are checked later by the chat path) is a
400 naming the Responses parameter.
"""
from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationInfo, field_validator

from gateway.errors import invalid_request
from gateway.collected import Collected
from gateway.openai_format import chat_message
from gateway.responses_extras import chat_extras
from gateway.responses_chat_fields import (chat_response_format, chat_tool_choice, chat_tools, check_text_verbosity,
                                          echoed_reasoning)
from gateway.responses_input import check_input_ids, input_messages
from gateway.schemas import ServiceTier, Temperature, TopP, refuse_extras

LOGPROBS_INCLUDE = "message.output_text.logprobs"
# OpenAI's includable fields; the others name outputs stepahead never makes (built-in
# tools, reasoning items, image inputs echoed back), so asking for them adds nothing.
INCLUDABLE = ("file_search_call.results", "web_search_call.results", "web_search_call.action.sources",
              "message.input_image.image_url", "computer_call_output.output.image_url",
              "code_interpreter_call.outputs", "reasoning.encrypted_content", LOGPROBS_INCLUDE)


class ResponsesRequest(BaseModel):
    """The fields stepahead reads, typed strictly as chat's are (a number sent as a string
    is a 400 naming it); the others are carried into the chat request it runs as
    (`responses_extras`), and treated as that request's own unknown fields are."""

    # strict, as chat's: "5" is not a number, nor 5.0 a count (a float field takes an integer)
    model_config = ConfigDict(extra="allow", strict=True)
    # what a union field's wrong type is told it takes (`gateway.validation_errors`)
    EXPECTED_TYPES: ClassVar[dict[str, str]] = {"input": "a string or an array of input items"}
    model: str
    # optional, as at OpenAI: a turn may answer `conversation`'s items or continue
    # `previous_response_id` alone (a request with none of them is refused: `responses_routes`)
    input: str | list[dict[str, Any]] = Field(default_factory=list)
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: StrictBool | None = None
    text: dict[str, Any] | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: Temperature = None   # its range checked here, as chat's: an out-of-range one is no valid
    top_p: TopP = None                # request (no traced step, nothing counted: QA142)
    stream: StrictBool = False   # "yes" or 1 is a 400, not a background run
    store: StrictBool = True
    background: StrictBool = False
    previous_response_id: str | None = None
    conversation: str | dict[str, Any] | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None
    truncation: Literal["auto", "disabled"] | None = None
    include: list[str] | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    service_tier: ServiceTier = None
    # accepted and echoed: caching is by prefix for every request here, and no built-in tools run
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None
    max_tool_calls: int | None = Field(default=None, ge=1)
    reasoning: dict[str, Any] | None = None   # accepted, echoed and ignored (`echoed_reasoning`)

    @field_validator("stream", "store", "background", mode="before")
    @classmethod
    def _null_is_the_default(cls, value: Any, info: ValidationInfo) -> Any:
        """As the reference types them (boolean or null): null is the field's default."""
        return cls.model_fields[info.field_name].default if value is None else value

    def wants_logprobs(self) -> bool:
        """Whether the text comes back with its tokens' log probabilities: only when `include`
        asks for them, as at OpenAI (`top_logprobs` alone, which OpenAI's replies echo as 0,
        sets how many alternatives each token lists then, and asks for nothing: QA209 F2)."""
        return LOGPROBS_INCLUDE in (self.include or ())

    def conversation_id(self) -> str | None:
        """The conversation this response is part of (`conversation`: its id, or an object
        with its `id` and no other key); a 400 when given with `previous_response_id`, which
        names another conversation."""
        raw = self.conversation
        if raw is None:
            return None
        if self.previous_response_id is not None:
            raise invalid_request("Mutually exclusive parameters: 'previous_response_id' and 'conversation' "
                                  "cannot both be given.", param="conversation", code="mutually_exclusive_parameters")
        conversation_id = raw.get("id") if isinstance(raw, dict) else raw
        if not isinstance(conversation_id, str) or not conversation_id:
            raise invalid_request("'conversation' must be a conversation id, or an object with its 'id'.",
                                  param="conversation.id" if isinstance(raw, dict) else "conversation",
                                  code="invalid_value")
        for key in raw if isinstance(raw, dict) else ():
            if key != "id":   # OpenAI's conversation object is `{"id": ...}`: another key is not dropped
                raise invalid_request(f"Unknown parameter: 'conversation.{key}'.", param=f"conversation.{key}",
                                      code="unknown_parameter")
        return conversation_id


def check_include(include: list[str] | None, param: str | None = None) -> None:
    """A 400 for a value OpenAI's `include` does not know, naming `include[i]` (or `param`:
    a query string's repeated `include`)."""
    for index, value in enumerate(include or ()):
        if value not in INCLUDABLE:
            raise invalid_request(f"Invalid value: {value!r}. Supported values are: "
                                  + ", ".join(repr(v) for v in INCLUDABLE) + ".",
                                  param=param or f"include[{index}]", code="invalid_value")


def check_include_query(query) -> None:
    """`check_include` for a list endpoint's query string, which repeats `include` (or
    `include[]`, as the official SDKs send it)."""
    for name in ("include", "include[]"):
        check_include(query.getlist(name), name)


# Responses parameters that would change what the model reads, which stepahead does not
# keep: ignoring them would answer a different question, so they are a 400.
UNSUPPORTED = {
    "prompt": "'prompt' is not supported. Stored prompt templates are not available here; send the "
              "instructions and input."}


def to_chat_body(request: ResponsesRequest, history: tuple[dict, ...] = (),
                 sources: list[tuple[str, ...]] | None = None) -> dict:
    """The chat completions body this request runs as (after `history`, the stored
    conversation of `previous_response_id` or `conversation`). `sources`, when given, gets
    per chat message the request's parameter it came from (`responses_errors.renamed` names it).
    The request's other fields follow as the chat request's own (`responses_extras`)."""
    refuse_extras(request, UNSUPPORTED)
    extras = chat_extras(request)
    check_include(request.include)
    check_text_verbosity(request.text)
    echoed_reasoning(request.reasoning)   # its checks: a 400 before anything runs
    check_input_ids(request.input)
    messages = ([{"role": "system", "content": request.instructions}] if request.instructions else [])
    messages += [dict(m) for m in history]
    if sources is not None:
        sources += [("instructions",)] * len(messages[:1] if request.instructions else [])
        sources += [("conversation" if request.conversation is not None else "previous_response_id",)] * len(history)
    messages += input_messages(request.input, sources)
    body: dict[str, Any] = {"model": request.model, "messages": messages, "stream": request.stream}
    logprobs = request.wants_logprobs()
    if request.tools:
        body["tools"] = chat_tools(request.tools)
    optional = {"tool_choice": chat_tool_choice(request.tool_choice),
                "parallel_tool_calls": request.parallel_tool_calls if request.tools else None,   # else echoed only
                "response_format": chat_response_format(request.text),
                "max_completion_tokens": request.max_output_tokens, "temperature": request.temperature,
                "top_p": request.top_p, "metadata": request.metadata, "user": request.user,
                "logprobs": True if logprobs else None, "top_logprobs": request.top_logprobs if logprobs else None,
                "service_tier": request.service_tier}
    body.update({k: v for k, v in optional.items() if v is not None})
    body.update(extras)   # never one of its keys: each is a Responses parameter or `MOVED`
    return body


def conversation_after(request: ResponsesRequest, chat_body: dict, collected: Collected) -> tuple[dict, ...]:
    """The chat messages of this turn's conversation, its reply appended: what a later
    `previous_response_id` continues. As in OpenAI's API, `instructions` do not carry
    over to the next turn. An empty reply (no text, no calls) is kept as an assistant turn
    with empty text: `content: None` alone is not a valid message, and the next turn
    would be refused for it."""
    reply = chat_message(collected)
    if reply["content"] is None and "tool_calls" not in reply:
        reply["content"] = ""
    return (*chat_body["messages"][1 if request.instructions else 0:], reply)
