"""A chat-path error named as the Responses API names things: a Responses request runs as
a chat request (gateway/responses_format.py), and the chat checks' errors name chat
parameters (`messages[3].tool_calls[0].id`, `response_format`).

Invariant: an error leaving `POST /v1/responses` names the Responses parameter or input
item it is about, in its `param` and where its message quotes it: a chat message's
error names the item (or parameter: `instructions`, `previous_response_id`,
`conversation`) it came from, one about a call of a merged assistant message names that
call's own `function_call` item (`input[j].call_id`; a call of the stored conversation
left unanswered names `input`, where its output belongs, and the message says where the
call came from), and chat parameter names are the
Responses ones (`text.format`, `max_output_tokens` for `max_completion_tokens` and
`max_tokens`, `include`), also for an error its run raises once the reply began
(`ErrorsRenamed`).
"""
from __future__ import annotations

import re
from collections.abc import AsyncIterator

from gateway.errors import ApiError

# `max_tokens` too: a Responses request's chat body never has it, so a completion budget
# error naming it (`errors.context_length_exceeded`) is about `max_output_tokens`
CHAT_TO_RESPONSES_PARAMS = (("tool_choice.function", "tool_choice"), ("messages", "input"),
                            ("response_format.json_schema", "text.format"), ("response_format", "text.format"),
                            ("max_completion_tokens", "max_output_tokens"), ("max_tokens", "max_output_tokens"),
                            ("logprobs", "include"))


# a chat message's words, as the Responses API says them for a function call's output
RESPONSES_WORDS = (("the tool message at", "the function_call_output at"), ("tool_call_id", "call_id"),
                   ("no earlier assistant message made", "no earlier function_call made"),
                   ("no tool message answers", "no function_call_output answers"),
                   ("'image_url'", "'input_image'"))
UNANSWERED = "no tool message answers"   # `chat_checks`: a call with no output before the next turn
# where a stored call came from, as an unanswered call's message says it
STORED_CALL_PLACES = {"previous_response_id": "a function_call of the response 'previous_response_id' names",
                      "conversation": "a function_call of the conversation"}
# the mark a function_call_output's source carries after its item (`("input[i]", OUTPUT_SOURCE)`):
# its chat tool message's `content` is the item's `output`
OUTPUT_SOURCE = "output"
MESSAGE_PARAM = re.compile(r"messages\[(\d+)\]")
CALL_FIELD = re.compile(r"\.tool_calls\[(\d+)\]\.(?:function\.)?(id|name|arguments)")
CALL_FIELD_NAMES = {"id": "call_id", "name": "name", "arguments": "arguments"}


def renamed(error: ApiError, sources: list[tuple[str, ...]] | None = None) -> ApiError:
    """A chat-path error with its `param` named as the Responses API names it, in the
    `param` field and where the message quotes it; an error about chat message k names
    `sources[k]` (`to_chat_body`), the item or parameter that message came from, and one
    about its call n names that call's own `function_call` item (`input[j].call_id`), and
    one about a tool message's `content` names its function_call_output's `output`."""
    at = MESSAGE_PARAM.match(error.param or "")
    if at is not None and sources is not None and int(at.group(1)) < len(sources):
        source, rest = sources[int(at.group(1))], error.param[at.end():]
        call = CALL_FIELD.match(rest)
        if call is not None and source[0] in STORED_CALL_PLACES and UNANSWERED in error.message:
            return _unanswered_stored_call(error, source[0])
        if call is not None and int(call.group(1)) < len(source) and source[0].startswith("input"):
            param = f"{source[int(call.group(1))]}.{CALL_FIELD_NAMES[call.group(2)]}{rest[call.end():]}"
        elif source[1:] == (OUTPUT_SOURCE,) and rest.startswith(".content"):   # a function_call_output's
            param = f"{source[0]}.{OUTPUT_SOURCE}{rest[len('.content'):]}"
        else:
            param = source[0] + rest if source[0].startswith("input") else source[0]
        quoted = error.param if error.param in error.message else at.group()
        error.message = error.message.replace(quoted, param if quoted == error.param else source[0])
        error.param = param
        for chat, responses in RESPONSES_WORDS:
            error.param, error.message = error.param.replace(chat, responses), error.message.replace(chat, responses)
        return error
    before = error.param
    for chat, responses in CHAT_TO_RESPONSES_PARAMS:
        if error.param and error.param.startswith(chat):
            error.param = responses + error.param[len(chat):]
            break
    if error.param and error.param.startswith("tools[") and ".function" in error.param:
        error.param = error.param.replace(".function", "", 1)
    if before and error.param != before:
        error.message = error.message.replace(f"'{before}'", f"'{error.param}'")
    for chat, responses in CHAT_TO_RESPONSES_PARAMS:   # other chat parameters the message names
        error.message = error.message.replace(f"'{chat}'", f"'{responses}'")
    if error.code == "context_length_exceeded":   # `errors.context_length_exceeded` speaks of the prompt's param
        error.message = error.message.replace("the messages", "the input").replace("your messages", "your input")
    return error


def _unanswered_stored_call(error: ApiError, source: str) -> ApiError:
    """The error for a call of the stored conversation (`source`: `previous_response_id`
    or `conversation`) that this request's `input` does not answer: it names `input`,
    where the call's output belongs (a stored call has no parameter of its own), and says
    where the call came from."""
    error.message = error.message.replace(f"the call at {error.param}", STORED_CALL_PLACES[source])
    error.message = error.message.replace(error.param, source)   # any other mention of the chat place
    for chat, responses in RESPONSES_WORDS:
        error.message = error.message.replace(chat, responses)
    error.message += " Send its function_call_output in 'input'."
    error.param = "input"
    return error


class ErrorsRenamed:
    """`backend` as a Responses request runs on it: the errors its run raises once the reply
    started (a schema too large to write, say) are `renamed` too, as the checks' are before
    it; everything else is the backend's own. The run's events are closed with it."""

    def __init__(self, backend, sources: list[tuple[str, ...]]) -> None:
        self._backend = backend
        self._sources = sources

    def __getattr__(self, name: str):
        return getattr(self._backend, name)

    async def run(self, prepared) -> AsyncIterator:
        events = self._backend.run(prepared)
        try:
            async for event in events:
                yield event
        except ApiError as error:
            raise renamed(error, self._sources) from None
        finally:
            await events.aclose()
