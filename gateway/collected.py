"""A reply collected from its events: each choice's text, refusal, tool calls, log
probabilities and end, for whole replies, traces and stored responses.

Invariants: collecting is linear in the reply (text and tool-call arguments are kept as
the deltas' parts and joined when read, once per change: CPython's in-place `+=` does not
apply to attributes, and a 320,000-character reply in 4-character deltas took 1.07 s);
a choice's text reads the same whatever its deltas were.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from gateway.backend import ChatEvent, Finished, RefusalDelta, TextDelta, TokenChoice, ToolCallDelta
from gateway.choices import merged_usage
from gateway.ids import new_tool_call_id


def reply_finish_reason(generation_reason: str, has_tool_calls: bool) -> str:
    """A reply's finish reason: "length" when its generation ran out of tokens, even with
    tool calls (their arguments may be cut, and OpenAI says "length" then too); else
    "tool_calls" when it made any; else the generation's own reason."""
    if generation_reason == "length" or not has_tool_calls:
        return generation_reason
    return "tool_calls"


MESSAGE = -1   # in `Collected.order`: the reply's message (tool calls are their indexes, >= 0)


def _joined(parts: list[str]) -> str:
    """The parts' text, the list left holding it as its one part (joined once per change)."""
    if len(parts) > 1:
        parts[:] = ["".join(parts)]
    return parts[0] if parts else ""


@dataclass(slots=True)
class ToolCallAccumulator:
    id: str
    name: str = ""
    argument_parts: list[str] = field(default_factory=list)

    @property
    def arguments(self) -> str:
        return _joined(self.argument_parts)


@dataclass(slots=True)
class Collected:
    """A whole non-streamed reply, built from the event stream. `order`: its message
    (MESSAGE, once it has text or a refusal) and each tool call's index, in the order of
    their first deltas (a Responses reply's output items, streamed or whole, come so)."""

    text_parts: list[str] = field(default_factory=list)
    tool_calls: dict[int, ToolCallAccumulator] = field(default_factory=dict)
    finished: Finished | None = None
    logprobs: list[TokenChoice] | None = None
    refusal_parts: list[str] = field(default_factory=list)
    order: list[int] = field(default_factory=list)

    @property
    def text(self) -> str:
        return _joined(self.text_parts)

    @property
    def refusal(self) -> str | None:
        """The model's refusal, None when it did not refuse."""
        return _joined(self.refusal_parts) if self.refusal_parts else None

    def add(self, event: ChatEvent) -> None:
        if isinstance(event, TextDelta):
            if event.text:
                if not self.text_parts and not self.refusal_parts:
                    self.order.append(MESSAGE)
                self.text_parts.append(event.text)
            if event.logprobs is not None:   # grown in place, not copied at each token
                self.logprobs = self.logprobs if self.logprobs is not None else []
                self.logprobs.extend(event.logprobs)
        elif isinstance(event, RefusalDelta):
            if event.refusal:
                if not self.text_parts and not self.refusal_parts:
                    self.order.append(MESSAGE)
                self.refusal_parts.append(event.refusal)
        elif isinstance(event, ToolCallDelta):
            call = self.tool_calls.get(event.index)
            if call is None:
                call = self.tool_calls[event.index] = ToolCallAccumulator(
                    event.id or new_tool_call_id())
                self.order.append(event.index)
            call.name += event.name or ""
            if event.arguments:
                call.argument_parts.append(event.arguments)
        else:
            self.finished = event

    def finish_reason(self) -> str:
        return reply_finish_reason(self.finished.finish_reason if self.finished else "stop",
                                   bool(self.tool_calls))


@dataclass(slots=True)
class Reply:
    """The reply so far, one `Collected` per choice."""

    choices: list[Collected] = field(default_factory=lambda: [Collected()])
    num_prompts: int = 1  # choices come in one group per prompt

    @classmethod
    def of(cls, num_choices: int, num_prompts: int = 1) -> "Reply":
        return cls([Collected() for _ in range(num_choices)], num_prompts)

    @property
    def first(self) -> Collected:
        return self.choices[0]

    def add(self, event: ChatEvent) -> None:
        self.choices[event.choice].add(event)

    @property
    def is_done(self) -> bool:
        return all(c.finished is not None for c in self.choices)

    @property
    def finished(self) -> Finished | None:
        """The request's merged `Finished` once every choice finished, else None."""
        return merged_usage([c.finished for c in self.choices], self.num_prompts) if self.is_done else None

    def best(self, num_choices: int, *, keep_logprobs: bool) -> "Reply":
        """Per prompt, the `num_choices` choices with the highest mean token log
        probability (ties: the earlier choice; a choice without tokens ranks last), best
        first, without their log probabilities unless `keep_logprobs` (completions'
        `best_of`)."""
        def score(index: int) -> float:  # the completion's tokens: an echoed prompt's come first
            choice = self.choices[index]
            count = choice.finished.usage.num_completion_tokens if choice.finished else 0
            tokens = (choice.logprobs or [])[-count:] if count else []
            return sum(t.logprob for t in tokens) / len(tokens) if tokens else -math.inf

        group = len(self.choices) // self.num_prompts
        chosen = []
        for start in range(0, len(self.choices), group):
            ranked = sorted(range(start, start + group), key=lambda i: (-score(i), i))[:num_choices]
            chosen += [self.choices[i] for i in ranked]
        if not keep_logprobs:
            chosen = [dataclasses.replace(c, logprobs=None, text_parts=[c.text]) for c in chosen]
        return Reply(chosen, self.num_prompts)
