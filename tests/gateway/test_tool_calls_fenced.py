"""QA220 F7: a bare call (or a list of them) inside a ```` ```json ```` fence is a call, in
`parse_tool_calls` and in the streamed parser alike, however the text is split; a fence
that cannot hold a bare call is text, and the streamed parser still releases it early."""
import pytest

from gateway.tool_calls import CallPiece, ContentPiece, ParsedToolCall, ToolCallStreamParser, opens_bare_json, \
    parse_tool_calls

TOOLS = frozenset({"get_weather", "get_time"})
CALL = '{"name": "get_time", "arguments": {"tz": "x"}}'


def streamed(text: str, size: int) -> tuple[str | None, list[ParsedToolCall]]:
    parser = ToolCallStreamParser(TOOLS)
    pieces = [piece for at in range(0, len(text), size) for piece in parser.feed(text[at:at + size])]
    pieces += parser.finish()
    content = "".join(piece.text for piece in pieces if isinstance(piece, ContentPiece))
    return content or None, [piece.call for piece in pieces if isinstance(piece, CallPiece)]


@pytest.mark.parametrize("text", [
    f"```json\n{CALL}\n```", f"```\n{CALL}\n```", f"  ```json\n{CALL}", f"```json{CALL}```",
    f'```json\n[{CALL}, {{"name": "get_weather", "arguments": {{"city": "Oslo"}}}}]\n```'])
@pytest.mark.parametrize("size", [1, 3, 1000])
def test_a_fenced_bare_call_is_a_call_whole_and_streamed(text, size):
    whole = parse_tool_calls(text, TOOLS)
    assert whole.content is None and whole.tool_calls[0] == ParsedToolCall("get_time", '{"tz": "x"}')
    assert streamed(text, size) == (whole.content, whole.tool_calls)


@pytest.mark.parametrize("text", [
    "```python\nprint(1)\n```", f"```json\n{CALL}\n```\nThat is the call.", "```json\n{\"city\": \"Oslo\"}\n```",
    "```", "``", "`x` is a name", f"```JSON\n{CALL}\n```"])
@pytest.mark.parametrize("size", [1, 4, 1000])
def test_a_fence_that_holds_no_bare_call_is_text_whole_and_streamed(text, size):
    whole = parse_tool_calls(text, TOOLS)
    assert whole.tool_calls == [] and whole.content == text
    assert streamed(text, size) == (text, [])


def test_a_fence_is_held_only_until_it_is_known_not_to_open_a_call():
    parser = ToolCallStreamParser(TOOLS)
    assert parser.feed("```") == [] and parser.feed("py") == [ContentPiece("```py")]
    assert [opens_bare_json(text) for text in ("", "`", "```js", "```json\n ", "```json\n{", "``` [", "```x")] == \
        [None, None, None, None, True, True, False]
