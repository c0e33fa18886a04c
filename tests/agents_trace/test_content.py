"""Captured request entries (content.py): a completions prompt and a chat request's tools,
in a form no chat message can be mistaken for."""
from __future__ import annotations

import json

from agents_trace.content import output_messages_json, prompt_entries, request_entries, split_tools_entry, tools_entry
from agents_trace.records import ChoiceOutput, ToolCall

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
BOOK = {"type": "function", "function": {"name": "book_table"}}


def test_prompt_entries_say_what_each_prompt_was():
    assert prompt_entries("Once upon") == ({"role": "prompt", "content": "Once upon"},)
    assert prompt_entries([5, 6, 7]) == ({"role": "prompt", "token_ids": [5, 6, 7], "content": "3 token ids"},)
    assert prompt_entries(["a", "b"]) == ({"role": "prompt", "content": "a"}, {"role": "prompt", "content": "b"})
    assert prompt_entries([[1], [2, 3]]) == ({"role": "prompt", "token_ids": [1], "content": "1 token ids"},
                                             {"role": "prompt", "token_ids": [2, 3], "content": "2 token ids"})
    assert prompt_entries("") == ({"role": "prompt", "content": ""},)


def test_prompt_entries_keep_an_odd_prompt_as_it_came_and_none_for_no_prompt():
    assert prompt_entries(None) == ()
    assert prompt_entries({"x": 1}) == ({"role": "prompt", "content": {"x": 1}},)
    assert prompt_entries([]) == ({"role": "prompt", "content": []},)
    assert prompt_entries([True, 2]) == ({"role": "prompt", "content": [True, 2]},)


def test_tools_entry_keeps_tools_and_choice_and_names_them():
    choice = {"type": "function", "function": {"name": "book_table"}}
    assert tools_entry([WEATHER, BOOK], choice) == {
        "role": "tools", "tools": [WEATHER, BOOK], "tool_choice": choice,
        "content": "get_weather, book_table (tool_choice: book_table)"}
    assert tools_entry([WEATHER], None) == {"role": "tools", "tools": [WEATHER], "content": "get_weather"}
    assert tools_entry(None, "none") == {"role": "tools", "tool_choice": "none", "content": "(tool_choice: none)"}
    assert tools_entry(None, None) is None
    assert tools_entry("odd", 3)["content"] == "? (tool_choice: 3)"   # never raises on odd input


def test_request_entries_of_chat_and_completions_bodies():
    assert request_entries({"messages": [], "tools": [WEATHER], "tool_choice": "auto"}) == (
        tools_entry([WEATHER], "auto"),)
    assert request_entries({"messages": []}) == ()
    assert request_entries({"prompt": [9, 9]}) == prompt_entries([9, 9])
    assert request_entries({"prompt": "x", "messages": "not a list"}) == prompt_entries("x")


def test_split_tools_entry_takes_only_a_last_tools_entry():
    user = {"role": "user", "content": "hi"}
    entry = tools_entry([WEATHER], None)
    assert split_tools_entry([user, entry]) == ([user], entry)
    assert split_tools_entry([user]) == ([user], None)
    assert split_tools_entry([]) == ([], None)
    assert split_tools_entry([entry, user]) == ([entry, user], None)


def test_output_messages_finish_reason_is_the_choices_and_error_for_a_reply_cut_short():
    """gen-ai-output-messages.json requires `finish_reason`; a reply its client closed mid-way
    (no finish reason) is not a "stop"."""
    [cut] = json.loads(output_messages_json("Hel", (), None))
    assert cut == {"role": "assistant", "parts": [{"type": "text", "content": "Hel"}], "finish_reason": "error"}
    call = ToolCall("c1", "f", '{"a": 1}')
    done = json.loads(output_messages_json("Hi", (), "stop", (ChoiceOutput("tool_calls", (call,), None),),
                                           ({"content": None},)))
    assert [m["finish_reason"] for m in done] == ["stop", "tool_calls"]
    assert json.loads(output_messages_json("x", (), "length"))[0]["finish_reason"] == "length"
