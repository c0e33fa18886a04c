"""Server-sent events of a streamed Responses API reply, from the chat events.

Each event is `event: TYPE` + `data: {..., "type": TYPE, "sequence_number": N}`, N
counting from 0. The events are OpenAI's: `response.created`, `response.in_progress`;
per output item `response.output_item.added`, its content (a message's
`content_part.added`, `output_text.delta`..., `output_text.done`, `content_part.done`,
and for a refusal the same with `refusal.delta`..., `refusal.done`; a call's
`function_call_arguments.delta`..., `.done`), `response.output_item.done`; then
`response.completed` (or `response.incomplete`) carrying the whole response. A
background response opens with `response.created` and `response.queued` instead, then
`response.in_progress` once admitted; a failure ends a stream with `response.failed` (a
shutdown's cut with an `error` event) and a cancel with
the open items' and part's `.done` events (the last item `incomplete`, each as far as it
got) and `response.cancelled`. Text deltas
and `output_text.done` carry `logprobs`, an empty list unless the request asked.

Invariants: the events come item by item, as OpenAI's do: each output item's events are
contiguous (added, its content, its `.done` events, done) and the items come in the order
of their first deltas, whatever order the chat deltas come in (`responses_item_order`);
every event of an item names its `output_index` and `item_id`, and its deltas add up to
what its `.done` events carry. A call is added with its name as it stands when it opens:
with its first arguments, or before the next other event (an upstream may split a name
over deltas; OpenAI's streams have no name deltas). A message's content part is closed
before its next part opens. The last item closes `incomplete` when the reply stopped short
(out of tokens, or cut by a content filter: `response.incomplete`, as the whole response
marks it); the whole response lists the same items in the same order (`Collected.order`).
"""
from __future__ import annotations

from collections.abc import Callable

from gateway.backend import ChatEvent, Finished, RefusalDelta, TextDelta, ToolCallDelta, Usage
from gateway.collected import Collected
from gateway.errors import SHUTTING_DOWN_CODE
from gateway.openai_format import dumps, logprob_entries
from gateway.responses_format import ResponsesRequest
from gateway.responses_item_order import MESSAGE_KEY, ItemOrder, Key, item_key
from gateway.responses_objects import (call_item, final_status, incomplete_reason, message_item, output_item_id,
                                       output_items, refusal_part, response_object, text_part)


def sse_event(kind: str, sequence_number: int, **fields) -> bytes:
    """One event of a Responses stream, as sent."""
    data = {"type": kind, "sequence_number": sequence_number, **fields}
    return f"event: {kind}\n".encode() + b"data: " + dumps(data) + b"\n\n"


def failure_details(body: dict) -> dict:
    """A failed response's `error` ({"code", "message"}) for an OpenAI error body."""
    error = body.get("error", {})
    return {"code": error.get("code") or error.get("type"), "message": error.get("message")}


class ResponsesStreamWriter:
    """The ChunkWriter of the Responses API (same interface: opening, event, done, error).
    `on_failed`, when given, gets the `failed` response a foreground stream ended with
    (`error`), to store it as a background one is."""

    def __init__(self, response_id: str, request: ResponsesRequest, created_at: int,
                 on_failed: Callable[[dict], None] | None = None) -> None:
        self.response_id, self.request, self.created_at = response_id, request, created_at
        self._on_failed = on_failed
        self.collected = Collected()
        self._sequence = 0
        self._order = ItemOrder()  # the items added, the one open, those waiting
        self._items: list[dict] = []  # output items closed so far, in output_index order
        self._part: tuple[str, list[str]] | None = None  # the open message's open part: its type, its text
        self._parts: list[dict] = []  # the open message's content parts closed so far

    def _event(self, kind: str, **fields) -> bytes:
        event = sse_event(kind, self._sequence, **fields)
        self._sequence += 1
        return event

    def snapshot(self, status: str, usage=None, error: dict | None = None, service_tier: str | None = None,
                 completed_at: float | None = None) -> dict:
        """The response object as it stands: the output items closed so far."""
        return response_object(self.response_id, self.request, created_at=self.created_at, status=status,
                               output=list(self._items), usage=usage, error=error, service_tier=service_tier,
                               incomplete=incomplete_reason(self.collected), completed_at=completed_at)

    def opening(self) -> bytes:
        snapshot = self.snapshot("in_progress")
        return (self._event("response.created", response=snapshot)
                + self._event("response.in_progress", response=snapshot))

    def queued(self) -> bytes:
        """A background response's first events, before it is admitted (then `started`)."""
        snapshot = self.snapshot("queued")
        return self._event("response.created", response=snapshot) + self._event("response.queued", response=snapshot)

    def started(self) -> bytes:
        return self._event("response.in_progress", response=self.snapshot("in_progress"))

    def failed(self, error: dict, usage: Usage | None = None) -> bytes:
        """The last events of a response that failed (`error`: {"code", "message"}): the item
        it was writing ended as it stands (`cut`), then `response.failed` with the response
        as it stopped, its output so far (QA125: the items a client was told were added), and
        `usage` when it is known (a run the gateway's stop ended)."""
        return self.cut() + self._event("response.failed", response=self.snapshot("failed", usage, error=error))

    def cancelled(self, usage: Usage | None = None) -> bytes:
        """A background response's last events when it was cancelled: the item it was
        writing ended as it stands (`cut`), then `response.cancelled` (the name of
        OpenAI's webhook event for it) with the response as it stopped: the output made
        so far, and `usage` when it is known."""
        return self.cut() + self._event("response.cancelled", response=self.snapshot("cancelled", usage))

    def cut(self) -> bytes:
        """Ends the items the reply was writing when it stopped short (a cancel), as they
        stand: the open item (its open part's `.done` events with the text so far, then its
        `response.output_item.done`), then each waiting one in turn (added, what it got,
        done), the last one `incomplete` (OpenAI's status for an item cut off); b"" when
        none is open or waiting. The snapshot lists them from then on."""
        return self._close_all("incomplete")

    def _item_id(self, kind: str, index: int) -> str:
        return output_item_id(self.response_id, kind, index)

    def _add(self, key: Key, item: dict) -> bytes:
        """`response.output_item.added` for `item` (`key` its kind and chat call index),
        at the next output_index, the open item from then on; b"" when it was added before."""
        position = self._order.add(key)
        if position is None:
            return b""
        return self._event("response.output_item.added", output_index=position, item=item)

    def _open_next(self) -> bytes:
        """Adds the first waiting item (none is open) and sends the events it waited with."""
        key, events = self._order.next_waiting()
        out = b""
        if key != MESSAGE_KEY:   # its name as it stands (the message is added by its first text)
            call = self.collected.tool_calls[key[1]]
            out = self._add(key, call_item(self._item_id(*key), call.id, call.name, "", "in_progress"))
        return out + b"".join(self._write(event) for event in events)

    def _advance(self) -> bytes:
        """While items wait: closes the open item if no delta of it can follow, and opens
        the next; stops at an open item that may go on (`ItemOrder.may_close`)."""
        out = b""
        while self._order.waiting and self._order.may_close(self.collected):
            if self._order.open is not None:
                out += self._close_item(*self._order.close(), "completed")
            out += self._open_next()
        return out

    def _close_all(self, status: str = "completed") -> bytes:
        """Ends the open item and then each waiting one in turn (added, its events, done),
        the last one with `status` (`incomplete` when the reply ran out of tokens in it),
        the others `completed`; b"" when none is open or waiting."""
        out = b""
        while self._order.open is not None or self._order.waiting:
            if self._order.open is None:
                out += self._open_next()
            else:
                out += self._close_item(*self._order.close(), "completed" if self._order.waiting else status)
        return out

    def _close_item(self, key: Key, position: int, status: str) -> bytes:
        kind, index = key
        item_id = self._item_id(kind, index)
        if kind == "message":
            out = self._close_part(item_id, position)
            item = message_item(item_id, "", status, content=self._parts)
            self._parts = []
        else:
            call = self.collected.tool_calls[index]
            item = call_item(item_id, call.id, call.name, call.arguments, status)
            out = self._event("response.function_call_arguments.done", item_id=item_id, output_index=position,
                              arguments=call.arguments)
        self._items.append(item)
        return out + self._event("response.output_item.done", output_index=position, item=item)

    def _close_part(self, item_id: str, position: int) -> bytes:
        """Ends the open message's open content part (its `.done` events), if any."""
        if self._part is None:
            return b""
        kind, pieces = self._part
        self._part = None
        text, index = "".join(pieces), len(self._parts)
        if kind == "output_text":
            part = text_part(text, self.collected.logprobs)
            out = self._event("response.output_text.done", item_id=item_id, output_index=position,
                              content_index=index, text=text, logprobs=part["logprobs"])
        else:
            part = refusal_part(text)
            out = self._event("response.refusal.done", item_id=item_id, output_index=position,
                              content_index=index, refusal=text)
        self._parts.append(part)
        return out + self._event("response.content_part.done", item_id=item_id, output_index=position,
                                 content_index=index, part=part)

    def _message_part(self, kind: str, piece: str) -> bytes:
        """The events that add the message (once) and open its content part of `kind`
        ("output_text" or "refusal") as needed, and add `piece` to it."""
        item_id = self._item_id("message", -1)
        out = self._add(MESSAGE_KEY, message_item(item_id, "", "in_progress"))
        position = self._order.positions[MESSAGE_KEY]
        if self._part is None or self._part[0] != kind:
            out += self._close_part(item_id, position)
            self._part = (kind, [])
            out += self._event("response.content_part.added", item_id=item_id, output_index=position,
                               content_index=len(self._parts),
                               part=text_part("") if kind == "output_text" else refusal_part(""))
        if piece:
            self._part[1].append(piece)
        return out

    def _write(self, event: ChatEvent) -> bytes:
        """The events of `event`, a delta of the open item (a call's without arguments: none)."""
        if isinstance(event, (TextDelta, RefusalDelta)):   # a message's part: its kind names its events
            kind, piece, extra = (("output_text", event.text, {"logprobs": logprob_entries(event.logprobs or [])})
                                  if isinstance(event, TextDelta) else ("refusal", event.refusal, {}))
            out = self._message_part(kind, piece)
            return out + self._event(f"response.{kind}.delta", item_id=self._item_id("message", -1),
                                     output_index=self._order.positions[MESSAGE_KEY],
                                     content_index=len(self._parts), delta=piece, **extra)
        if not event.arguments:
            return b""
        return self._event("response.function_call_arguments.delta", item_id=self._item_id("call", event.index),
                           output_index=self._order.positions[("call", event.index)], delta=event.arguments)

    def event(self, event: ChatEvent) -> bytes:
        self.collected.add(event)
        out = self._write(event) if self._order.takes(item_key(event), event) else b""
        if isinstance(event, ToolCallDelta) and not event.arguments:
            return out   # may be a piece of its name: its item is added with the next other event
        if not isinstance(event, Finished):
            return out + self._advance()
        # a reply with no text and no call is still one (empty) message, as the whole response lists it
        if not self._order.positions and not self._order.waiting:
            out += self._message_part("output_text", "")
        status = final_status(self.collected)
        out += self._close_all(status)
        return out + self._event(f"response.{status}", response=self.snapshot(
            status, event.usage, service_tier=event.service_tier, completed_at=event.ended_at))

    @staticmethod
    def done() -> bytes:
        return b""

    def error(self, body: dict) -> bytes:
        """The last events of a stream that failed once begun: `response.failed` with the
        response as it stopped (the open item cut, as `failed` does; its `error` the failure's code and message, as OpenAI's
        stream and a background response end), handed to `on_failed` first (stored, so its
        id reads back `failed`); a stream the shutdown cut ends with an `error` event instead
        (`errors.SHUTTING_DOWN_CODE`: the client retries the request; nothing is stored)."""
        error = body.get("error", {})
        if error.get("code") == SHUTTING_DOWN_CODE:   # the shutdown's cut: the client retries the request
            return self._event("error", code=error.get("code"), message=error.get("message"),
                               param=error.get("param"))
        out = self.cut()   # the item it was writing ended as it stands, then listed, as `failed` does
        response = self.snapshot("failed", error=failure_details(body))
        if self._on_failed is not None:
            self._on_failed(response)
        return out + self._event("response.failed", response=response)


def whole_response(response_id: str, request: ResponsesRequest, collected: Collected, created_at: int) -> dict:
    """The non-streamed response object."""
    finished = collected.finished
    status = final_status(collected)
    return response_object(response_id, request, created_at=created_at, status=status,
                           output=output_items(collected, response_id),
                           usage=finished.usage if finished else None,
                           service_tier=finished.service_tier if finished else None,
                           incomplete=incomplete_reason(collected),
                           completed_at=finished.ended_at if finished else None)

