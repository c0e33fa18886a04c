"""`--max-input-tokens` on a chat line: the messages cut to about the cap, keeping the head."""
from agents_trace.replay.chat_cut import cut_messages

SYSTEM = {"role": "system", "content": "s" * 100}


def test_no_cut_without_a_cap_or_under_it():
    messages = [SYSTEM, {"role": "user", "content": "u" * 1000}]
    assert cut_messages(messages, None, 1000, None) is messages
    assert cut_messages(messages, None, 1000, 1000) is messages


def test_the_head_is_kept_the_crossing_message_cut_and_the_rest_left_out():
    messages = [SYSTEM, {"role": "user", "content": "u" * 1000}, {"role": "user", "content": "v" * 1000}]
    cut = cut_messages(messages, None, 2000, 600)   # about 30% of the characters
    assert cut[0] == SYSTEM and len(cut) == 2 and cut[1]["role"] == "user"
    assert 450 < len(cut[1]["content"]) < 550 and set(cut[1]["content"]) == {"u"}
    assert messages[1]["content"] == "u" * 1000   # the trace's own message is untouched


def test_the_tools_count_first_and_are_never_cut():
    tools = [{"type": "function", "function": {"name": "f", "description": "d" * 900}}]
    messages = [{"role": "user", "content": "u" * 1000}]
    [user] = cut_messages(messages, tools, 2000, 1000)   # the tools take about all of the share
    assert len(user["content"]) < 100


def test_a_message_with_text_parts_is_cut_in_its_text_and_the_result_is_never_empty():
    parts = [{"type": "text", "text": "a" * 500}, {"type": "image_url", "image_url": {"url": "x"}},
             {"type": "text", "text": "b" * 500}]
    [cut] = cut_messages([{"role": "user", "content": parts}], None, 1000, 300)
    assert cut["content"][0]["text"] == "a" * len(cut["content"][0]["text"]) and cut["content"][2]["text"] == ""
    assert cut["content"][1] == parts[1]
    [only] = cut_messages([{"role": "user", "content": "u" * 1000}], None, 1000, 1)
    assert only["role"] == "user" and len(only["content"]) < 5


def test_a_cut_never_leaves_a_tool_message_without_its_call():
    call = {"role": "assistant", "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}
    messages = [SYSTEM, {"role": "user", "content": "go"}, call,
                {"role": "tool", "tool_call_id": "c1", "content": "r" * 2000}]
    cut = cut_messages(messages, None, 2000, 400)
    assert cut[:3] == messages[:3] and cut[3]["tool_call_id"] == "c1" and len(cut[3]["content"]) < 2000
