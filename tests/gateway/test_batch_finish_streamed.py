"""QA153 finding 4: a batch's end read every result into memory (a list of them all, then
each file's bytes joined), and the running batch read them all again at every run of its
requests. Finishing now reads the results file a line at a time and spools each file to
disk: the files hold the same bytes as before, and the heap never holds the results."""
from __future__ import annotations

import asyncio
import json
import tracemalloc

from starlette.applications import Starlette

import gateway.batch_runner as batch_runner
from gateway.auth import KeyRing
from gateway.batch_runner import BatchRunner
from gateway.batch_store import Batch, BatchStore, request_result, succeeded, written_form
from gateway.config import TenantConfig
from gateway.file_store import FileStore

NUM_RESULTS = 5000
PAD = 1500   # characters of each answer: the results file is some 9 MB


def _result(n: int) -> dict:
    if n % 10 == 3:   # one in ten a 4xx: the error file
        return request_result(f"r{n}", 400, {"error": {"code": "bad", "message": "no"}}, f"req-{n}", None)
    # some with U+2028, escaped in the files (`line_breaks_escaped`; few: escaping a long non-ASCII text is slow)
    content = f"answer {n} " + ("\u2028 é " if n % 50 == 1 else "") + "w" * PAD
    return request_result(f"r{n}", 200, {"object": "chat.completion", "choices": [{"message": {"content": content}}],
                                         "usage": {"prompt_tokens": 7, "completion_tokens": n % 5}}, f"req-{n}", None)


def _input_lines() -> bytes:
    return "\n".join(json.dumps({"custom_id": f"r{n}", "method": "POST", "url": "/v1/chat/completions",
                                 "body": {"model": "m", "messages": []}}) for n in range(NUM_RESULTS)).encode()


def test_a_batch_of_5000_results_finishes_with_the_same_bytes_never_holding_them_all(tmp_path, monkeypatch):
    whole_reads: list[tuple[BatchStore, str]] = []   # (another test's store may read its own meanwhile)
    read_whole = BatchStore._results
    monkeypatch.setattr(BatchStore, "_results", lambda self, batch_id: (
        whole_reads.append((self, batch_id)), read_whole(self, batch_id))[1])
    peaks: list[int] = []
    finish = batch_runner.finish_batch

    async def measured(*args, **kwargs):   # the heap's peak while the runner finishes the batch
        tracemalloc.start()
        try:
            await finish(*args, **kwargs)
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
    monkeypatch.setattr(batch_runner, "finish_batch", measured)

    async def main():
        store, files = BatchStore(tmp_path), FileStore(tmp_path)
        upload = await files.add_bytes("a", "in.jsonl", "batch", _input_lines())
        batch = Batch("batch_1", "a", "/v1/chat/completions", upload.id, "24h", 0, 10**10, total=NUM_RESULTS,
                      model="m")
        batch.moved_to("in_progress", 1)
        await store.put(batch)
        await store.append_results(batch.id, [_result(n) for n in range(NUM_RESULTS)])
        kept = await store.results(batch.id)   # the files' bytes as the finish wrote them before
        expected = [b"".join(written_form(r)[1] for r in kept if succeeded(r) == answers) for answers in (True, False)]
        num_bytes = (tmp_path / "batch_results" / "batch_1.jsonl").stat().st_size
        del kept
        whole_reads.clear()
        keys = KeyRing((TenantConfig("a", ()),))
        runner = BatchRunner(store, files, lambda: keys, concurrency=2)
        await runner.start(Starlette())   # it goes on with the batch: every request has its result, so it ends
        async with asyncio.timeout(20):
            while (found := runner.current(await store.get("a", batch.id))).status != "completed" or not peaks:
                await asyncio.sleep(0.01)   # (its finish measured: the files below are read after it)
        output, error = (await files.read("a", found.output_file_id), await files.read("a", found.error_file_id))
        whole_reads[:] = [read for read in whole_reads if read[0] is store]
        await runner.stop()
        store.close()
        files.close()
        return found, expected, (output, error), num_bytes

    found, expected, written, num_bytes = asyncio.run(main())
    assert written[0] == expected[0] and written[1] == expected[1]   # byte for byte
    assert (found.completed, found.failed) == (NUM_RESULTS - NUM_RESULTS // 10, NUM_RESULTS // 10)
    assert found.usage["input_tokens"] == 7 * found.completed
    assert not list((tmp_path / "batch_results").iterdir())   # its results dropped, no spool left
    assert whole_reads == []   # the results were never read whole, neither while it ran nor at its end
    assert len(peaks) == 1 and peaks[0] < num_bytes / 10, (peaks, num_bytes)   # nor a file's bytes, at its end
