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
from gateway.item_fields import check_item_fields
from gateway.collected import Collected
from gateway.openai_format import chat_message
from gateway.responses_errors import OUTPUT_SOURCE
from gateway.responses_extras import chat_extras
from gateway.responses_chat_fields import (chat_response_format, chat_tool_choice, chat_tools, check_text_verbosity,
                                          echoed_reasoning)
from gateway.schemas import ServiceTier, Temperature, TopP, refuse_extras

ROLES = ("user", "assistant", "system", "developer")
TEXT_PARTS = ("input_text", "output_text", "text")
# the string field each supported content part carries (an assistant's `refusal` part only)
PART_TEXT_FIELDS = {**dict.fromkeys(TEXT_PARTS, "text"), "input_image": "image_url", "refusal": "refusal"}
MAX_ITEM_ID_CHARS = 256
IMAGE_DETAILS = ("low", "high", "auto", "original")   # an `input_image`'s `detail`, as chat's image part takes it
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


def _text_of(content: Any, param: str, *, is_assistant: bool = False) -> str | list[dict]:
    """Chat content for a Responses item's content (or a function call's `output`: the
    field `param` ends in is the one its errors name); an assistant's `refusal` parts are
    left out (`_refusal_of` reads them)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise invalid_request(f"'{param.rsplit('.', 1)[-1]}' must be a string or a list of parts.", param=param)
    parts = []
    for index, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if not isinstance(kind, str) or kind not in PART_TEXT_FIELDS or (kind == "refusal" and not is_assistant):
            raise invalid_request(f"Content part type {kind!r} is not supported.", param=f"{param}[{index}]")
        if kind == "input_image" and part.get("file_id") is not None:
            raise invalid_request("An input_image's 'file_id' is not supported: send the image as 'image_url' "
                                  "(a URL, or the image as a base64 data URL).", param=f"{param}[{index}].file_id",
                                  code="unsupported_parameter")
        field = PART_TEXT_FIELDS[kind]
        if not isinstance(part.get(field), str):
            raise invalid_request(f"A content part of type {kind!r} needs '{field}' as a string.",
                                  param=f"{param}[{index}].{field}")
        if kind in TEXT_PARTS:
            parts.append({"type": "text", "text": part["text"]})
        elif kind == "input_image":
            parts.append({"type": "image_url", "image_url": _image_url(part, f"{param}[{index}]")})
    return parts


def _image_url(part: dict, param: str) -> dict:
    """Chat's `image_url` for an `input_image` part (`param` names it): its URL and its
    `detail` (null is none), one of `IMAGE_DETAILS` (else a 400 naming it)."""
    detail = part.get("detail")
    if detail is None:
        return {"url": part["image_url"]}
    if detail not in IMAGE_DETAILS:
        raise invalid_request(f"Invalid value: {detail!r}. Supported values are: "
                              + ", ".join(repr(v) for v in IMAGE_DETAILS) + ".", param=f"{param}.detail",
                              code="invalid_value")
    return {"url": part["image_url"], "detail": detail}


def _refusal_of(content: Any) -> str | None:
    """The text of an assistant item's `refusal` content parts (as a response's output
    has them), None when it has none."""
    if not isinstance(content, list):
        return None
    refusals = [part["refusal"] for part in content if isinstance(part, dict) and part.get("type") == "refusal"
                and isinstance(part.get("refusal"), str)]
    return "".join(refusals) if refusals else None


def check_item_id(item: dict, where: str) -> None:
    """A 400 naming `where.id` when the item's `id` is not a string of 1 to 256
    characters, or is one its URL cannot name (a `.` or `..` between slashes, which
    clients and the router take for a path's dot-segment: QA229); an item without one (or
    with `"id": null`) is given one when listed."""
    own_id = item.get("id")
    if own_id is not None and not (isinstance(own_id, str) and 0 < len(own_id) <= MAX_ITEM_ID_CHARS):
        raise invalid_request(f"An item's 'id' must be a string of 1 to {MAX_ITEM_ID_CHARS} characters.",
                              param=f"{where}.id", code="invalid_value")
    if own_id is not None and any(segment in (".", "..") for segment in own_id.split("/")):
        raise invalid_request(f"An item's 'id' may not be '.' or '..', nor hold one between slashes ({own_id!r}): "
                              "its URL could not name it.", param=f"{where}.id", code="invalid_value")


def check_input_ids(items: str | list[dict[str, Any]]) -> None:
    """A 400 for an `input` item whose id is malformed (`check_item_id`) or repeats an
    earlier item's (every listed input item has its own id), or with a field its type does
    not take (`check_item_fields`)."""
    if isinstance(items, str):
        return
    seen: set[str] = set()
    for index, item in enumerate(items):
        check_item_id(item, f"input[{index}]")
        check_item_fields(item, f"input[{index}]")
        own_id = item.get("id")
        if own_id in seen:
            raise invalid_request(f"Duplicate item found with id '{own_id}'.", param=f"input[{index}].id",
                                  code="invalid_value")
        if own_id is not None:
            seen.add(own_id)


def input_messages(items: str | list[dict[str, Any]], sources: list[tuple[str, ...]] | None = None) -> list[dict]:
    """Chat messages for `input`: consecutive function calls become one assistant
    message with several tool calls; reasoning items are dropped. `sources`, when given,
    gets per message the items it came from as the request names them (`("input[i]",)`;
    a merged assistant message's: one per call, in order; a function_call_output's:
    `("input[i]", OUTPUT_SOURCE)`, its message's content being the item's `output`)."""
    whole = isinstance(items, str)
    if whole:
        items = [{"role": "user", "content": items}]
    messages: list[dict] = []
    for index, item in enumerate(items):
        param = "input" if whole else f"input[{index}]"
        num_before = len(messages)
        kind = item.get("type", "message")
        if kind == "message":
            if item.get("role") not in ROLES:
                raise invalid_request(f"A message's role must be one of {', '.join(ROLES)}.", param=f"{param}.role")
            is_assistant = item["role"] == "assistant"
            message = {"role": item["role"],
                       "content": _text_of(item.get("content"), f"{param}.content", is_assistant=is_assistant)}
            refusal = _refusal_of(item.get("content")) if is_assistant else None
            if refusal is not None:   # a refusal sent back: chat's `refusal`, its content the text or ""
                message["refusal"] = refusal
                message["content"] = message["content"] or ""
            messages.append(message)
        elif kind == "function_call":
            call = {"id": item.get("call_id"), "type": "function",
                    "function": {"name": item.get("name"), "arguments": item.get("arguments", "")}}
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant" and last.get("tool_calls") and not last["content"]:
                last["tool_calls"].append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            messages.append({"role": "tool", "tool_call_id": item.get("call_id"),
                             "content": output if isinstance(output, str) else _text_of(output, f"{param}.output")})
        elif kind != "reasoning":
            raise invalid_request(f"Input item type {kind!r} is not supported.", param=param)
        if sources is not None and len(messages) > num_before:
            sources.append((param, OUTPUT_SOURCE) if kind == "function_call_output" else (param,))
        elif sources is not None and kind == "function_call":   # one more call of the message before
            sources[-1] += (param,)
    return messages


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
