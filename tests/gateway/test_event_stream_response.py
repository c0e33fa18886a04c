"""A stream's response against clients that leave or stop reading: the event loop is
never held by a backlog, a stalled reader is cut, and a stream the shutdown cuts is
closed (charged, traced) before anything waits on its client."""
import asyncio

from gateway.http_io import EventStreamResponse

SCOPE = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": []}


def _stream(num_chunks: int, pulled: list[int], closes: list[bool]) -> EventStreamResponse:
    async def chunks():
        for number in range(num_chunks):   # a backlog: every event ready, no wait between them
            pulled[0] += 1
            yield b"data: %d\n\n" % number
    return EventStreamResponse(chunks(), headers={}, on_close=closes.append, on_cut=lambda: b"data: cut\n\n")


def test_a_client_gone_with_a_backlog_ready_ends_the_stream_at_once():
    """uvicorn's `send` returns at once for a client gone; the backlog used to be encoded
    and 'sent' whole before the disconnect watcher could run (every tenant waiting)."""
    pulled, closes, others = [0], [], []

    async def gone_client():
        async def send(message):   # a closed connection: uvicorn drops what is sent
            return None

        async def receive():
            return {"type": "http.disconnect"}

        async def another_tenant():
            others.append(pulled[0])   # where the stream was when the loop let someone else run
        asyncio.get_running_loop().call_soon(lambda: asyncio.ensure_future(another_tenant()))
        await _stream(100_000, pulled, closes)(SCOPE, receive, send)

    asyncio.run(gone_client())
    assert pulled[0] < 10 and closes == [False]
    assert others and others[0] < 10


def test_a_client_that_stops_reading_is_cut_once_a_chunk_waits_past_the_stall_limit():
    pulled, closes = [0], []

    async def stalled_client():
        sent = []

        async def send(message):
            sent.append(message)
            if len(sent) > 3:   # the client's window is full: uvicorn's flow control waits for ever
                await asyncio.Event().wait()

        async def receive():
            await asyncio.Event().wait()   # no disconnect: the client just stopped reading
        stream = _stream(100_000, pulled, closes)
        stream.stalled_write_s = 0.2
        await asyncio.wait_for(stream(SCOPE, receive, send), 5.0)

    asyncio.run(stalled_client())
    assert closes == [False] and pulled[0] <= 4


def test_a_stream_the_shutdown_cuts_is_closed_before_its_cut_event_waits_on_a_full_window():
    pulled, closes = [0], []

    async def shutdown_while_stalled():
        sent, closed_when_cut_sent = [], []

        async def send(message):
            if message.get("body") == b"data: cut\n\n":
                closed_when_cut_sent.append(list(closes))
            sent.append(message)
            if len(sent) > 3:
                await asyncio.Event().wait()

        async def receive():
            await asyncio.Event().wait()
        stream = _stream(100_000, pulled, closes)
        stream.cut_write_s = 0.2
        task = asyncio.ensure_future(stream(SCOPE, receive, send))
        await asyncio.sleep(0.1)
        task.cancel()   # the server's graceful shutdown timeout
        done, _ = await asyncio.wait([task], timeout=5.0)
        assert done and task.cancelled()
        return closed_when_cut_sent

    # closed (charged, traced) before the cut event was tried; that send gave up on the full window
    assert asyncio.run(shutdown_while_stalled()) == [[False]] and closes == [False]
