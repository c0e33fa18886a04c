"""A reader's stream of a background response: cut at shutdown while it lags the run, it
still reads every event in order, then the `error` event numbered as the run's next."""
import asyncio
import json

from gateway.background_runs import BackgroundRun
from gateway.background_stream import run_event_stream
from gateway.responses_stream import sse_event


def _numbers(data: bytes) -> list[int]:
    return [json.loads(line.removeprefix(b"data: "))["sequence_number"]
            for line in data.splitlines() if line.startswith(b"data: ")]


def test_a_lagging_reader_cut_at_shutdown_gets_what_it_missed_then_the_error():
    async def read_two_then_cut(starting_after: int) -> tuple[list[int], list[int], str]:
        run = BackgroundRun("a", "resp_1", lambda status: {"status": status})
        for number in range(6):   # the run is ahead of its reader
            run.append(sse_event("response.output_text.delta", number, delta="x"))
        stream = run_event_stream(run, starting_after)
        chunks = stream._chunks
        read = [await chunks.__anext__(), await chunks.__anext__()]
        await chunks.__anext__()   # a third handed to the stream, not yet sent whole when the cut came
        cut = stream._on_cut()
        await chunks.aclose()
        last = json.loads([line for line in cut.splitlines() if line.startswith(b"data: ")][-1][6:])
        return _numbers(b"".join(read)), _numbers(cut), last["type"]

    read, cut, last_type = asyncio.run(read_two_then_cut(-1))
    assert read == [0, 1] and cut == [2, 3, 4, 5, 6] and last_type == "error"
    read, cut, _ = asyncio.run(read_two_then_cut(2))   # a reader resuming after event 2
    assert read == [3, 4] and cut == [5, 6]
