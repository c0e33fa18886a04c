"""A running batch's memory (QA153 findings 3, 4): it holds each request's place in its
input file, not its body (read from the file when it is sent), keeps that file open while
it runs (a file deleted meanwhile is still read to the end) and closes it when it ends; a
large batch that ends gives its freed memory back."""
import asyncio
import gc
import json
import os
import threading
import tracemalloc

import gateway.batch_runner as batch_runner
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from gateway.auth import KeyRing
from gateway.batch_runner import BatchRunner
from gateway.batch_store import Batch, BatchStore
from gateway.config import TenantConfig
from gateway.file_store import FileStore

ENDED = ("completed", "expired", "cancelled", "failed")
MANY = 150   # more lines than two runs read at once (gateway/batch_input.py: CHUNK_LINES, 64)


def _lines(count: int, pad: int = 0) -> bytes:
    return "\n".join(json.dumps({"custom_id": f"r{n}", "method": "POST", "url": "/v1/chat/completions", "body": {
        "model": "m", "messages": [{"role": "user", "content": f"c{n:04d}" + "w" * pad}]}}) for n in range(count)
    ).encode()


class HeldApp:
    """Chat completions that hold every request until `go` is set; `seen` the contents sent."""

    def __init__(self) -> None:
        self.go = asyncio.Event()
        self.seen: list[str] = []

    def app(self) -> Starlette:
        async def chat(request: Request):
            self.seen.append((await request.json())["messages"][0]["content"][:5])
            await self.go.wait()
            return JSONResponse({"object": "chat.completion"})
        return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])

    async def first_sent(self) -> None:
        while not self.seen:
            await asyncio.sleep(0.01)


async def _started(held: HeldApp, data: bytes, *, measure: bool = False):
    """(runner, files, upload id, batch, bytes allocated by creating it, with `measure`) of
    a batch of `data` whose first request is with `held`'s app."""
    keys = KeyRing((TenantConfig("a", ()),))
    files = FileStore(None)
    runner = BatchRunner(BatchStore(None), files, lambda: keys, concurrency=2)
    await runner.start(held.app())
    upload = await files.add_bytes("a", "in.jsonl", "batch", data)
    del data
    if measure:
        gc.collect()
        tracemalloc.start()
    try:
        batch = await runner.create(Batch("batch_m", "a", "/v1/chat/completions", upload.id, "24h", 0, 10**10))
        await held.first_sent()
        gc.collect()
        allocated = tracemalloc.get_traced_memory()[0] if measure else 0
    finally:
        tracemalloc.stop()
    return runner, files, upload.id, batch, allocated


async def _ended(runner: BatchRunner, batch_id: str) -> Batch:
    deadline_s = asyncio.get_running_loop().time() + 30
    while (batch := runner.current(await runner.store.get("a", batch_id))).status not in ENDED:
        assert asyncio.get_running_loop().time() < deadline_s, batch
        await asyncio.sleep(0.01)
    return batch


def _open_on(path) -> int:
    """How many of this process's descriptors are open on `path`."""
    fds = "/proc/self/fd"
    count = 0
    for fd in os.listdir(fds):
        try:
            count += os.readlink(f"{fds}/{fd}") in (str(path), f"{path} (deleted)")
        except OSError:   # closed meanwhile (the listing's own descriptor)
            pass
    return count


def test_a_running_batch_holds_its_requests_places_not_their_bodies():
    """600 requests of 8 KiB (4.8 MiB of bodies): while the batch runs, what creating it
    left allocated is its lines' places and the bodies of the requests about to be sent
    (one run of lines), not every body (the old runner held them all parsed: QA153, 240-430
    MiB for each batch of a 190 MiB file)."""
    async def main():
        held = HeldApp()
        runner, files, _, batch, allocated = await _started(held, _lines(600, pad=8192), measure=True)
        held.go.set()
        done = await _ended(runner, batch.id)
        runner.store.close()
        files.close()
        return allocated, done

    allocated, done = asyncio.run(main())
    assert done.status == "completed" and done.completed == 600
    assert allocated < 2 * 2**20, f"{allocated / 2**20:.1f} MiB held by a running batch of 4.8 MiB of bodies"


def test_a_request_is_read_from_the_input_file_when_it_is_sent():
    """A line past the first run of lines, changed in the file after the batch was created
    (in place, same length: the checked request's custom_id and shape), is sent as the file
    holds it when it is sent, not as it was when checked."""
    later = MANY - 20

    async def main():
        held = HeldApp()
        runner, files, file_id, batch, _ = await _started(held, _lines(MANY))
        path = files.path_of(await files.get("a", file_id))
        data = path.read_bytes()
        with open(path, "r+b") as changed:
            changed.seek(data.index(f'"c{later:04d}"'.encode()) + 1)
            changed.write(b"x")
        held.go.set()
        done = await _ended(runner, batch.id)
        runner.store.close()
        files.close()
        return done, held.seen

    done, seen = asyncio.run(main())
    assert done.status == "completed" and done.completed == MANY
    assert f"x{later:04d}" in seen and f"c{later:04d}" not in seen


def test_an_input_file_deleted_while_its_batch_runs_is_read_to_the_end_and_closed_then():
    """As documented (docs/api.md): a batch whose input file is deleted while it runs (no
    restart) completes, every request sent; its file is held open only while it runs."""
    count = MANY

    async def main():
        held = HeldApp()
        runner, files, file_id, batch, _ = await _started(held, _lines(count))
        path = files.path_of(await files.get("a", file_id))
        open_while_running = _open_on(path)
        await files.delete("a", file_id)
        held.go.set()
        done = await _ended(runner, batch.id)
        await asyncio.sleep(0.05)   # (the run's task ends after its last save)
        open_after = _open_on(path)
        runner.store.close()
        files.close()
        return done, open_while_running, open_after, held.seen

    done, open_while_running, open_after, seen = asyncio.run(main())
    assert done.status == "completed" and (done.completed, done.failed) == (count, 0)
    assert sorted(seen) == sorted(f"c{n:04d}" for n in range(count))
    assert (open_while_running, open_after) == (1, 0)


def test_a_cancelled_batch_closes_its_input_file():
    async def main():
        held = HeldApp()
        runner, files, file_id, batch, _ = await _started(held, _lines(200))
        path = files.path_of(await files.get("a", file_id))
        await runner.cancel(batch)
        held.go.set()
        done = await _ended(runner, batch.id)
        await asyncio.sleep(0.05)
        open_after = _open_on(path)
        runner.store.close()
        files.close()
        return done, open_after

    done, open_after = asyncio.run(main())
    assert done.status == "cancelled" and open_after == 0


def test_a_large_batch_that_ends_gives_its_freed_memory_back(monkeypatch):
    """Past TRIM_AFTER_LINES requests (here lowered to 5), a batch's end calls
    `release_freed_memory` (glibc's malloc_trim: QA153, RSS stayed at 1,546 MiB after every
    batch was cancelled), off the event loop; a smaller one does not."""
    calls = []
    monkeypatch.setattr(batch_runner, "TRIM_AFTER_LINES", 5)
    monkeypatch.setattr(batch_runner, "release_freed_memory",
                        lambda: calls.append(threading.current_thread() is threading.main_thread()))

    async def run(count: int) -> Batch:
        held = HeldApp()
        held.go.set()
        runner, files, _, batch, _ = await _started(held, _lines(count))
        done = await _ended(runner, batch.id)
        await asyncio.sleep(0.05)
        runner.store.close()
        files.close()
        return done

    assert asyncio.run(run(4)).status == "completed" and calls == []
    assert asyncio.run(run(6)).status == "completed" and calls == [False]
