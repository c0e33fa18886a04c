import json

from gateway.tool_calls import (CallPiece, ContentPiece, ToolCallStreamParser, parse_tool_calls)

NAMES = frozenset({"get_weather", "search"})


def test_parse_tool_calls_hermes_block():
    text = 'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
    out = parse_tool_calls(text, NAMES)
    assert out.content == "Let me check."
    assert [(c.name, json.loads(c.arguments)) for c in out.tool_calls] == [
        ("get_weather", {"city": "Oslo"})]


def test_parse_tool_calls_several_blocks_and_string_arguments():
    text = ('<tool_call>{"name": "search", "arguments": "{\\"q\\": \\"a\\"}"}</tool_call>'
            '<tool_call>{"name": "get_weather", "parameters": {"city": "b"}}</tool_call>')
    out = parse_tool_calls(text, NAMES)
    assert out.content is None
    assert [c.name for c in out.tool_calls] == ["search", "get_weather"]
    assert json.loads(out.tool_calls[0].arguments) == {"q": "a"}
    assert json.loads(out.tool_calls[1].arguments) == {"city": "b"}


def test_parse_tool_calls_unclosed_block_at_end():
    out = parse_tool_calls('<tool_call>{"name": "search", "arguments": {}}', NAMES)
    assert [c.name for c in out.tool_calls] == ["search"]


def test_parse_tool_calls_bare_json_object_and_list():
    one = parse_tool_calls('{"name": "search", "arguments": {"q": 1}}', NAMES)
    assert [c.name for c in one.tool_calls] == ["search"] and one.content is None
    many = parse_tool_calls('[{"name": "search", "arguments": {}}, '
                            '{"name": "get_weather", "arguments": {}}]', NAMES)
    assert [c.name for c in many.tool_calls] == ["search", "get_weather"]


def test_parse_tool_calls_keeps_invalid_or_unknown_as_content():
    broken = '<tool_call>{"name": "search", "arguments": {</tool_call>'
    assert parse_tool_calls(broken, NAMES).tool_calls == []
    assert parse_tool_calls(broken, NAMES).content == broken
    unknown = '{"name": "rm_rf", "arguments": {}}'
    assert parse_tool_calls(unknown, NAMES).content == unknown
    plain = '{"answer": 42}'
    assert parse_tool_calls(plain, NAMES).content == plain


def _stream(text: str, step: int) -> tuple[str, list]:
    parser = ToolCallStreamParser(NAMES)
    pieces = []
    for i in range(0, len(text), step):
        pieces += parser.feed(text[i:i + step])
    pieces += parser.finish()
    content = "".join(p.text for p in pieces if isinstance(p, ContentPiece))
    calls = [(p.call.name, p.call.arguments) for p in pieces if isinstance(p, CallPiece)]
    return content, calls


def test_stream_parser_matches_whole_text_parse_for_every_split():
    text = ('Sure. <tool_call>{"name": "search", "arguments": {"q": "<b>"}}</tool_call> and '
            '<tool_call>{"name": "get_weather", "arguments": {}}</tool_call> done <tool')
    whole = parse_tool_calls(text, NAMES)
    for step in range(1, 12):
        content, calls = _stream(text, step)
        assert calls == [(c.name, c.arguments) for c in whole.tool_calls]
        assert content.replace(" ", "") == (whole.content or "").replace(" ", "")


def test_stream_parser_releases_plain_text_early():
    parser = ToolCallStreamParser(NAMES)
    assert parser.feed("Hello <tool") == [ContentPiece("Hello")]   # its space waits for the text after it
    assert parser.feed("box>") == [ContentPiece(" <toolbox>")]


def test_stream_parser_bare_json_decided_at_end():
    parser = ToolCallStreamParser(NAMES)
    assert parser.feed('  {"name": "search", ') == []
    assert parser.feed('"arguments": {"q": 2}}') == []
    [piece] = parser.finish()
    assert isinstance(piece, CallPiece) and piece.call.name == "search"
    parser = ToolCallStreamParser(NAMES)
    parser.feed('{"not": "a call"}')
    assert parser.finish() == [ContentPiece('{"not": "a call"}')]


def test_stream_parser_matches_whole_text_parse_for_random_splits_of_long_calls():
    import random

    rng = random.Random(5)
    call = '<tool_call>{"name": "search", "arguments": {"q": "' + "</tool_cal " * 300 + '"}}</tool_call>'
    for _ in range(60):
        text = "".join(rng.choice(["text ", call, "<tool_call>broken</tool_call>", "<tool_", "\n"])
                       for _ in range(rng.randrange(1, 6)))
        whole = parse_tool_calls(text, NAMES)
        parser, pieces, at = ToolCallStreamParser(NAMES), [], 0
        while at < len(text):
            size = rng.choice((1, 2, 3, 11, 12, 40))
            pieces += parser.feed(text[at:at + size])
            at += size
        pieces += parser.finish()
        assert [(p.call.name, p.call.arguments) for p in pieces if isinstance(p, CallPiece)] == \
            [(c.name, c.arguments) for c in whole.tool_calls], text
        content = "".join(p.text for p in pieces if isinstance(p, ContentPiece))
        assert content.split() == (whole.content or "").split(), text


def test_stream_parser_is_linear_in_a_long_call():
    """Each delta of an open call is searched with the few characters before it only:
    the parser's buffer never holds the call's text between deltas."""
    parser = ToolCallStreamParser(NAMES)
    parser.feed('<tool_call>{"name": "search", "arguments": {"q": "')
    for _ in range(2000):
        assert parser.feed("word ") == []
        assert parser._buffer == "" and len(parser._tail) < len("</tool_call>")
    assert parser.feed('"}}</tool_') == []
    [piece] = parser.feed("call>")   # a closing tag split between deltas ends the call at once
    assert isinstance(piece, CallPiece) and len(piece.call.arguments) > 10000
