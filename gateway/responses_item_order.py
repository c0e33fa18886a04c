"""Which output item a streamed Responses reply writes now, whatever order its chat deltas
come in (`responses_stream.ResponsesStreamWriter` sends the events).

Invariants: one item is open at a time, so each item's events are contiguous, added,
its content, done, before the next is added, as OpenAI's are. Items open in the order of
their first deltas (the message's first with text), which is their `output_index` and
the order the whole response lists them in (`Collected.order`). A chat stream may come
back to any call (parallel calls' deltas need not be contiguous, each carries its
`index`; a local model may write text between calls), so the open item's deltas are
written as they come and the others' wait, in order, until it closes. The open item may
close before the reply ends only when another item's delta came and it is a call whose
arguments are whole JSON (`arguments_are_whole`: nothing but whitespace may follow them),
so a stream of one call after another, as OpenAI's chat streams are, writes each call as
it comes; the message closes only with the reply. A delta for a call already closed (more
after its whole JSON: a broken upstream) is dropped, so what is sent stays what it lists.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from gateway.backend import ChatEvent, RefusalDelta, TextDelta, ToolCallDelta
from gateway.collected import Collected

Key = tuple[str, int]   # an output item: ("message", -1) or ("call", its chat call index)
MESSAGE_KEY: Key = ("message", -1)


def item_key(event: ChatEvent) -> Key | None:
    """The output item an event writes to; None for one that writes to none (an end, an
    empty text or refusal delta: the message comes with its first text)."""
    if isinstance(event, ToolCallDelta):
        return ("call", event.index)
    if isinstance(event, TextDelta) and event.text or isinstance(event, RefusalDelta) and event.refusal:
        return MESSAGE_KEY
    return None


def arguments_are_whole(arguments: str) -> bool:
    """Whether a call's arguments so far are one whole JSON value (an object, as a call's
    are). Parsed only when they end with a closing bracket: partial arguments cost a
    glance at their end, not a parse, however often they are asked about."""
    end = len(arguments)
    while end and arguments[end - 1] in " \t\r\n":
        end -= 1
    if not end or arguments[end - 1] not in "}]":
        return False
    try:
        json.loads(arguments)
    except (ValueError, RecursionError):
        return False
    return True


@dataclass(slots=True)
class ItemOrder:
    """The items added so far (`positions`, to their output_index), the `open` one, and
    those `waiting` to open, with their events as they came, in order."""

    positions: dict[Key, int] = field(default_factory=dict)
    open: Key | None = None
    waiting: dict[Key, list[ChatEvent]] = field(default_factory=dict)

    def add(self, key: Key) -> int | None:
        """Opens `key` at the next output_index, returned; None when it was added before."""
        if key in self.positions:
            return None
        self.open = key
        position = self.positions[key] = len(self.positions)
        return position

    def takes(self, key: Key | None, event: ChatEvent) -> bool:
        """Whether `event` (of item `key`) is written now, a delta of the open item; else
        it waits for its item to open, or is dropped (a closed call's)."""
        if key is None or key == self.open:
            return key is not None
        if key not in self.positions:
            self.waiting.setdefault(key, []).append(event)
        return False

    def next_waiting(self) -> tuple[Key, list[ChatEvent]]:
        """The first waiting item and its events, no longer waiting (to be added)."""
        key = next(iter(self.waiting))
        return key, self.waiting.pop(key)

    def close(self) -> tuple[Key, int]:
        """The open item and its output_index; none is open after."""
        key, self.open = self.open, None
        return key, self.positions[key]

    def may_close(self, collected: Collected) -> bool:
        """Whether the next waiting item may open: none is open, or the open one is a call
        whose arguments so far (in `collected`) are whole."""
        if self.open is None:
            return True
        return self.open != MESSAGE_KEY and arguments_are_whole(collected.tool_calls[self.open[1]].arguments)
