"""A reply cut (`max_tokens`) inside SmolLM2's closing `</tool_call>` tag after a whole call's
JSON is that call, wherever in the tag the cut falls, streamed and whole: no template markup
reaches `content`, and the reply finishes "length" (QA138 M1: cut in `</tool_` it came back as
the raw `<tool_call>...</tool_` text with no call, cut one token earlier as a call). A call
whose JSON itself is cut stays content, tag and all, streamed and whole alike."""
import json

import pytest

from shards.protocol import FinishEvent, SamplingParams, TokenEvent

from gateway.backend import Prepared
from gateway.collected import Collected
from gateway.local_generation import LocalCall, run_free
from gateway.openai_format import ChunkWriter, ResponseHeader, chat_message
from gateway.tool_calls import CLOSE_TAG, CallPiece, ContentPiece, ToolCallStreamParser, parse_tool_calls

NAMES = frozenset({"read_file"})
CALL_JSON = '{"name": "read_file", "arguments": {"path": "src/block.py"}}'
CALL = ("read_file", '{"path": "src/block.py"}')
HEAD = "<tool_call>\n" + CALL_JSON + "\n"   # the reply up to its closing tag
REPLY = HEAD + CLOSE_TAG
# every cut point inside the closing tag: nothing of it, "<", "</", ..., "</tool_call"; then all of it
CUTS_IN_TAG = list(range(len(CLOSE_TAG) + 1))


def streamed(text: str, step: int) -> tuple[str, list[tuple[str, str]]]:
    """The stream parser's content and calls for `text` fed in `step`-character deltas."""
    parser = ToolCallStreamParser(NAMES)
    pieces = []
    for at in range(0, len(text), step):
        pieces += parser.feed(text[at:at + step])
    pieces += parser.finish()
    content = "".join(piece.text for piece in pieces if isinstance(piece, ContentPiece))
    return content, [(piece.call.name, piece.call.arguments) for piece in pieces if isinstance(piece, CallPiece)]


def whole(text: str) -> tuple[str | None, list[tuple[str, str]]]:
    parsed = parse_tool_calls(text, NAMES)
    return parsed.content, [(call.name, call.arguments) for call in parsed.tool_calls]


@pytest.mark.parametrize("cut", CUTS_IN_TAG)
def test_a_whole_calls_json_cut_anywhere_in_its_closing_tag_is_that_call(cut):
    text = HEAD + CLOSE_TAG[:cut]
    assert whole(text) == (None, [CALL])
    for step in range(1, len(text) + 1):
        assert streamed(text, step) == ("", [CALL]), step


@pytest.mark.parametrize("cut", CUTS_IN_TAG)
def test_text_before_and_a_closed_call_before_a_call_cut_in_its_tag_stay_as_they_are(cut):
    text = "Let me read it.\n" + REPLY + "\n" + HEAD + CLOSE_TAG[:cut]
    assert whole(text) == ("Let me read it.", [CALL, CALL])
    for step in (1, 2, 3, 5, 7, len(text)):
        assert streamed(text, step) == ("Let me read it.", [CALL, CALL]), step


@pytest.mark.parametrize("cut", range(len("<tool_call>"), len(HEAD.rstrip())))
def test_a_call_whose_json_is_cut_stays_content_streamed_and_whole(cut):
    text = REPLY[:cut]   # the tag, then JSON short of its last brace
    assert whole(text) == (text, [])
    for step in (1, 3, len(text)):
        assert streamed(text, step) == (text, []), step


@pytest.mark.parametrize("cut", [2, 7, 11])
def test_a_cut_json_followed_by_part_of_the_closing_tag_stays_content(cut):
    text = "<tool_call>\n" + CALL_JSON[:-1] + "\n" + CLOSE_TAG[:cut]   # the object's last brace missing
    assert whole(text) == (text, [])
    assert streamed(text, 1) == (text, [])


class CharEngine:
    """Writes `reply` one character a token and stops at `max_tokens` ("length")."""

    max_context_tokens = 100_000

    def __init__(self, reply: str):
        self.tokenizer, self.reply = None, reply

    async def generate(self, item):
        text = self.reply[:item.sampling.max_tokens]
        for index, char in enumerate(text):
            yield TokenEvent(item.request_id, [ord(char)], char, worker_id="w0" if index == 0 else None,
                             num_cached_tokens=0 if index == 0 else None)
        reason = "length" if len(text) < len(self.reply) else "stop"
        yield FinishEvent(item.request_id, reason, len(item.prompt_token_ids), 0, len(text), 0.01, "w0")


async def chat_reply(reply: str, max_tokens: int) -> tuple[dict, dict]:
    """The chat reply's (message, finish_reason) whole, and the same assembled from its SSE chunks."""
    prompt = [1, 2, 3]
    schema = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
    call = LocalCall(prompt, SamplingParams(max_tokens=max_tokens), None, NAMES, None, False,
                     tool_schemas={"read_file": schema})
    prepared = Prepared("req", "t", "m", len(prompt), len(prompt) + max_tokens, call, prompt)
    events = [event async for event in run_free(CharEngine(reply), prepared, call)]
    collected = Collected()
    for event in events:
        collected.add(event)
    message = chat_message(collected)
    whole_reply = {"content": message["content"], "finish_reason": collected.finish_reason(),
                   "tool_calls": [(c["function"]["name"], c["function"]["arguments"])
                                  for c in message.get("tool_calls", [])]}
    writer = ChunkWriter(ResponseHeader("chatcmpl-1", "m"), is_chat=True, include_usage=False)
    chunks = [json.loads(line[len(b"data: "):]) for event in events
              for line in writer.event(event).split(b"\n\n") if line]
    content, calls, finish = [], {}, None
    for chunk in chunks:
        choice = chunk["choices"][0]
        content.append(choice["delta"].get("content") or "")
        for delta in choice["delta"].get("tool_calls", []):
            name, arguments = calls.get(delta["index"], ("", ""))
            calls[delta["index"]] = (name + (delta["function"].get("name") or ""),
                                     arguments + delta["function"]["arguments"])
        finish = choice["finish_reason"] or finish
    stream_reply = {"content": "".join(content) or None, "finish_reason": finish,
                    "tool_calls": [calls[index] for index in sorted(calls)]}
    return whole_reply, stream_reply


@pytest.mark.parametrize("cut", CUTS_IN_TAG[:-1])
async def test_max_tokens_cut_in_the_closing_tag_gives_the_call_and_finishes_length(cut):
    whole_reply, stream_reply = await chat_reply(REPLY, len(HEAD) + cut)
    expected = {"content": None, "finish_reason": "length", "tool_calls": [CALL]}
    assert whole_reply == expected
    assert stream_reply == expected


async def test_the_uncut_call_finishes_tool_calls_and_a_cut_json_stays_text():
    assert await chat_reply(REPLY, 200) == (
        {"content": None, "finish_reason": "tool_calls", "tool_calls": [CALL]},) * 2
    cut_json = REPLY[:len(HEAD) - 3]   # '... "src/block.py"' : the arguments are cut
    assert await chat_reply(REPLY, len(cut_json)) == (
        {"content": cut_json, "finish_reason": "length", "tool_calls": []},) * 2
