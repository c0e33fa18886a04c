"""Cross-field checks on a chat request that hold for every backend, and the one that
holds for local models alone (`refuse_unsteerable_strict`).

Invariant: after `check_chat_request` passes, every tool has a unique name and a
valid JSON Schema for its parameters, a named `tool_choice` and `parallel_tool_calls` come
with tools, and every tool message answers a tool call made by an earlier assistant
message, once, and no legacy function calling is asked for (`functions`, `function_call`,
an assistant message's `function_call`: a 400 `unsupported_parameter` naming it, for every
model, as a `role: "function"` message is: an upstream's `function_call` reply has no place
in the gateway's replies, and the flow could not be finished).
"""
from __future__ import annotations

from jsonschema import SchemaError

from gateway.errors import invalid_request
from gateway.schema_keywords import strict_refusal
from gateway.schema_checks import SchemaChecker
from gateway.schema_limits import SchemaPastLimit
from gateway.schemas import ChatCompletionRequest, NamedToolChoice, refuse_extras

# messages (chat) or input items (Responses) a request may hold: checked before the body is
# validated, which with tracing costs ~25 us a message on the event loop (200,000 small
# messages in an 8 MiB body held every tenant's requests for seconds); real agent requests
# hold a few hundred
MAX_MESSAGES = 10_000

LEGACY_FUNCTION_CALLING = {
    "functions": "Legacy 'functions' are not supported; send them as 'tools' "
                 "([{\"type\": \"function\", \"function\": {...}}]).",
    "function_call": "Legacy 'function_call' is not supported; use 'tool_choice'.",
}
HISTORY_FUNCTION_CALL = ("A legacy 'function_call' in an assistant message is not supported: send it as 'tool_calls' "
                         "([{\"id\": ..., \"type\": \"function\", \"function\": {\"name\": ..., \"arguments\": "
                         "...}}]) and its result as a tool message.")


def refuse_legacy_function_calling(request: ChatCompletionRequest) -> None:
    """A 400 `unsupported_parameter` naming the first legacy function-calling field set (not
    null: SDKs send `function_call: null`)."""
    refuse_extras(request, LEGACY_FUNCTION_CALLING)
    for index, message in enumerate(request.messages):
        if message.role == "assistant" and message.sets("function_call"):
            raise invalid_request(HISTORY_FUNCTION_CALL, param=f"messages[{index}].function_call",
                                  code="unsupported_parameter")


def check_tools(request: ChatCompletionRequest, tenant: str, schemas: SchemaChecker) -> None:
    tools = request.tools or []
    names = [tool.function.name for tool in tools]
    for index, tool in enumerate(tools):
        schema = tool.function.parameters
        if schema is None:
            continue
        param = f"tools[{index}].function.parameters"
        if schema.get("type", "object") != "object":
            raise invalid_request("Tool parameters must be a JSON Schema of type 'object'.",
                                  param=param, code="invalid_function_parameters")
        try:
            schemas.check(tenant, schema)
        except SchemaError as exc:
            raise invalid_request(f"Invalid JSON Schema for tool '{tool.function.name}': "
                                  f"{exc.message}", param=param,
                                  code="invalid_function_parameters") from None
        except SchemaPastLimit as past:
            raise past.refusal(param, "invalid_function_parameters") from None
    if len(set(names)) != len(names):
        raise invalid_request("Tool names must be unique.", param="tools")
    choice = request.tool_choice
    if choice is not None and not tools and choice != "none":
        raise invalid_request("'tool_choice' is only allowed when 'tools' are given.",
                              param="tool_choice")
    if isinstance(choice, NamedToolChoice) and choice.function.name not in names:
        raise invalid_request(f"tool_choice names the function '{choice.function.name}', "
                              "which is not among the tools.", param="tool_choice")
    if request.parallel_tool_calls is not None and not tools:   # as OpenAI's chat API (QA208 F2)
        raise invalid_request("Invalid value for 'parallel_tool_calls': 'parallel_tool_calls' is only allowed when "
                              "'tools' are specified.", param="parallel_tool_calls", code="invalid_value")


def refuse_unsteerable_strict(request: ChatCompletionRequest) -> None:
    """For a local model, whose replies the gateway steers (`json_schemas`), after the
    schemas were found valid: a 400 naming the first `strict: true` schema (the
    `json_schema` response_format's, a function's parameters) that uses a keyword OpenAI's
    strict mode does not support either, which the reader cannot hold a reply to
    (`schema_keywords.STRICT_REFUSED`: `allOf`, `not`, `prefixItems`, ...), the keyword and its
    place (QA220 F3). Without `strict`, such a schema is followed as far as it is steered,
    the keyword unenforced; so are the reader's other limits under `strict`."""
    response_format = request.response_format
    if response_format is not None and response_format.type == "json_schema" and response_format.json_schema.strict:
        _refuse_strict(response_format.json_schema.schema_object(),
                       f"response_format '{response_format.json_schema.name}'", "response_format", "invalid_json_schema")
    for index, tool in enumerate(request.tools or ()):
        if tool.function.strict and tool.function.parameters is not None:
            _refuse_strict(tool.function.parameters, f"function '{tool.function.name}'",
                           f"tools[{index}].function.parameters", "invalid_function_parameters")


def _refuse_strict(schema: dict, what: str, param: str, code: str) -> None:
    refused = strict_refusal(schema)
    if refused is None:
        return
    keyword, place = refused
    named = "'items' given as a list (a tuple)" if keyword == "items" else f"'{keyword}'"
    raise invalid_request(f"Invalid schema for {what}: {named} (at {place}) is not supported with 'strict': true: "
                          "a local model's reply cannot be held to it. Send the schema without it, or leave 'strict' "
                          f"out (or false) to have the rest of the schema followed, {named} not enforced.",
                          param=param, code=code)


def check_tool_messages(request: ChatCompletionRequest, answers_follow_calls: bool = True) -> None:
    """Every tool message answers a call an earlier assistant message made, and, as at
    OpenAI, every call an assistant message makes is answered before the next user,
    system or developer message and before the messages end; with `answers_follow_calls`
    (chat), as OpenAI's chat API, also before the next assistant message (QA220 F6). A
    Responses request passes False: that API pairs calls and outputs by call_id, so a
    response's output items sent back as they came (calls, then text) precede the
    outputs (`responses_input.input_messages` makes them two assistant messages). A call id is
    pending once at a time and answered once, as at OpenAI ("Duplicate function_call_output
    for call_id"): a call made while one with its id waits for its answer, or a second
    answer to a call, is a 400 naming it (an id used again in a later turn, after its first
    call was answered, is a new call: some frameworks number calls per turn)."""
    answered: set[str] = set()
    unanswered: dict[str, str] = {}   # call id -> the call's place ("messages[i].tool_calls[j].id")
    for index, message in enumerate(request.messages):
        if message.role == "assistant" and unanswered and answers_follow_calls:
            raise invalid_request("An assistant message with 'tool_calls' must be followed by tool messages responding "
                                  "to each 'tool_call_id'. The following tool_call_ids did not have response messages: "
                                  + ", ".join(unanswered), param=f"messages[{index}].role")
        if message.role == "assistant":
            for number, call in enumerate(message.tool_calls or []):
                place = f"messages[{index}].tool_calls[{number}].id"
                if call.id in unanswered:
                    raise invalid_request(
                        f"Invalid parameter: tool_call_id '{call.id}' at {place} is the id of an earlier "
                        "call still waiting for its answer: each call needs an id of its own.", param=place)
                answered.discard(call.id)
                unanswered[call.id] = place
        elif message.role == "tool":
            if message.tool_call_id in answered:
                raise invalid_request(
                    f"Invalid parameter: the tool message at messages[{index}] answers tool_call_id "
                    f"'{message.tool_call_id}' a second time: each call is answered once.",
                    param=f"messages[{index}].tool_call_id")
            if message.tool_call_id not in unanswered:
                raise invalid_request(
                    f"Invalid parameter: the tool message at messages[{index}] answers "
                    f"tool_call_id '{message.tool_call_id}', which no earlier assistant message "
                    "made.", param=f"messages[{index}].tool_call_id")
            del unanswered[message.tool_call_id]
            answered.add(message.tool_call_id)
        elif unanswered:
            _raise_unanswered(unanswered, "before the next turn")
    if unanswered:
        _raise_unanswered(unanswered, "by the end of the conversation")


def _raise_unanswered(unanswered: dict[str, str], where: str) -> None:
    call_id, place = next(iter(unanswered.items()))
    raise invalid_request(f"Invalid parameter: no tool message answers tool_call_id '{call_id}' (the call "
                          f"at {place}) {where}.", param=place)


def check_chat_request(request: ChatCompletionRequest, tenant: str, schemas: SchemaChecker,
                       answers_follow_calls: bool = True) -> None:
    """Every check above but the local models' own (`refuse_unsteerable_strict`); a
    Responses request's passes `answers_follow_calls=False` (`check_tool_messages`)."""
    refuse_legacy_function_calling(request)
    check_tools(request, tenant, schemas)
    check_tool_messages(request, answers_follow_calls)


def check_message_count(body: object, field: str) -> None:
    """A 400 (`array_above_max_length`, as OpenAI names it) when `body[field]` is a list
    of more than MAX_MESSAGES items; anything else is left to validation."""
    items = body.get(field) if isinstance(body, dict) else None
    if isinstance(items, list) and len(items) > MAX_MESSAGES:
        raise invalid_request(f"Invalid '{field}': array too long. Expected an array with maximum length "
                              f"{MAX_MESSAGES}, but got an array with length {len(items)} instead.", param=field,
                              code="array_above_max_length")
