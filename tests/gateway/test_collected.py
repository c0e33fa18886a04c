"""A reply collected from its events: the same text and calls whatever the deltas, kept
as parts joined when read."""
import random

from gateway.backend import Finished, TextDelta, ToolCallDelta, Usage
from gateway.collected import Collected, Reply


def test_text_and_arguments_read_the_same_whatever_the_deltas():
    rng = random.Random(2)
    text = "".join(rng.choice(["word ", "é", "\n", "🙂", ""]) for _ in range(500))
    arguments = '{"q": "' + "x" * 300 + '"}'
    collected, at, arg_at = Collected(), 0, 0
    while at < len(text) or arg_at < len(arguments):
        size = rng.randrange(0, 9)
        collected.add(TextDelta(text[at:at + size]))
        collected.add(ToolCallDelta(0, id="call_1" if arg_at == 0 else None, name="search" if arg_at == 0 else None,
                                    arguments=arguments[arg_at:arg_at + size]))
        at, arg_at = at + size, arg_at + size
        if rng.random() < 0.1:   # read midway: the parts are joined, and go on growing after
            assert collected.text == text[:at] and len(collected.text_parts) <= 1
    collected.add(Finished("stop", Usage(3, 4)))
    assert collected.text == text and collected.text_parts == [text]
    call = collected.tool_calls[0]
    assert (call.id, call.name, call.arguments) == ("call_1", "search", arguments)
    assert collected.finish_reason() == "tool_calls"
    assert Collected().text == "" and Collected().text_parts == []


def test_best_choices_keep_their_text_and_drop_log_probabilities():
    reply = Reply.of(2)
    for choice, text in enumerate(("first", "second")):
        reply.add(TextDelta(text[:2], choice=choice))
        reply.add(TextDelta(text[2:], choice=choice))
        reply.add(Finished("stop", Usage(1, 2), choice=choice))
    best = reply.best(1, keep_logprobs=False)
    assert [c.text for c in best.choices] == ["first"] and best.choices[0].logprobs is None
    best.choices[0].add(TextDelta("!"))
    assert reply.first.text == "first"   # the chosen copy grows on its own
