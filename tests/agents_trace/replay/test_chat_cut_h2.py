"""`--max-input-tokens` never leaves a kept assistant tool call without its answer (the
gateway, as OpenAI, refuses such a prompt with a 400): the answers are kept, cut to no text."""
from __future__ import annotations

from agents_trace.replay.chat_cut import cut_messages

SYSTEM = {"role": "system", "content": "S" * 400}
USER = {"role": "user", "content": "U" * 50}


def _call(*ids: str, content=None) -> dict:
    return {"role": "assistant", "content": content,
            "tool_calls": [{"id": i, "type": "function", "function": {"name": "f", "arguments": '{"q": "x"}'}}
                           for i in ids]}


def _answer(call_id: str, size: int) -> dict:
    return {"role": "tool", "tool_call_id": call_id, "content": "R" * size}


def _calls_answered(messages: list) -> bool:
    """Every call is answered and every answer answers an earlier call (gateway/chat_checks.py's rule)."""
    made, answered = set(), set()
    for message in messages:
        if message["role"] == "tool":
            if message["tool_call_id"] not in made:
                return False
            answered.add(message["tool_call_id"])
        made.update(call["id"] for call in message.get("tool_calls") or [])
    return made == answered


def test_a_cut_inside_the_assistant_call_keeps_its_answer_with_no_text():
    """QA69's case: the prefix ended on the assistant message with tool_calls, its answer dropped."""
    messages = [SYSTEM, USER, _call("call_1"), _answer("call_1", 400)]
    cut = cut_messages(messages, None, 1000, 560)
    assert cut == [SYSTEM, USER, messages[2], {"role": "tool", "tool_call_id": "call_1", "content": ""}]
    assert _calls_answered(cut)


def test_an_assistant_message_with_text_cut_keeps_its_calls_and_their_answers():
    messages = [SYSTEM, USER, _call("a", content="T" * 300), _answer("a", 400), USER]
    cut = cut_messages(messages, None, 2000, 950)   # the budget ends inside the assistant's text
    assert [m["role"] for m in cut] == ["system", "user", "assistant", "tool"]
    assert 0 < len(cut[2]["content"]) < 300 and cut[2]["tool_calls"] == messages[2]["tool_calls"]
    assert cut[3] == {"role": "tool", "tool_call_id": "a", "content": ""} and _calls_answered(cut)


def test_two_calls_whose_first_answer_is_cut_keep_the_second_answer_too():
    messages = [SYSTEM, USER, _call("a", "b"), _answer("a", 400), _answer("b", 400), USER]
    cut = cut_messages(messages, None, 1400, 700)   # the budget ends inside answer "a"
    assert [m.get("tool_call_id") for m in cut] == [None, None, None, "a", "b"]
    assert 0 < len(cut[3]["content"]) < 400 and cut[4]["content"] == "" and _calls_answered(cut)


def test_answers_past_the_next_user_turn_are_not_taken_and_answers_with_text_parts_lose_their_text():
    parts_answer = {"role": "tool", "tool_call_id": "a", "content": [{"type": "text", "text": "R" * 400}]}
    messages = [SYSTEM, USER, _call("a"), parts_answer]
    cut = cut_messages(messages, None, 1000, 560)
    assert cut[3] == {"role": "tool", "tool_call_id": "a", "content": [{"type": "text", "text": ""}]}
    broken = [SYSTEM, USER, _call("a"), USER, _answer("a", 10)]   # a recording no gateway accepts
    assert cut_messages(broken, None, 1000, 870) == [SYSTEM, USER]   # the budget ends in the 2nd user turn:
    # its answer comes after that turn, so the cut stops before the unanswered call
