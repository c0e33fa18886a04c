"""A batch's end: its results split into the output and error files, encoded off the
event loop (a large batch's encoding held every tenant's requests for seconds)."""
import asyncio
import json
import threading

import gateway.batch_finish
from gateway.batch_finish import finish_batch
from gateway.batch_store import Batch, BatchStore, request_result
from gateway.file_store import FileStore


def _answer(custom_id: str, status: int) -> dict:
    body = {"usage": {"prompt_tokens": 5, "completion_tokens": 2}} if status == 200 else {"error": {"code": "x"}}
    return request_result(custom_id, status, body, f"req-{custom_id}", None)


def test_finishing_splits_the_results_and_encodes_them_off_the_event_loop(monkeypatch):
    encoded_on = []
    written_form = gateway.batch_finish.written_form

    def recording(result):
        encoded_on.append(threading.get_ident())
        return written_form(result)
    monkeypatch.setattr(gateway.batch_finish, "written_form", recording)

    async def finish():
        store, files = BatchStore(None), FileStore(None)
        batch = Batch("batch_1", "a", "/v1/chat/completions", "file-1", "24h", 1, 86401, total=3)
        batch.moved_to("in_progress", 2)
        await finish_batch(store, files, batch, [_answer("r1", 200), _answer("r2", 400), _answer("r3", 200)], [],
                           "completed", None, clock=lambda: 3.0)
        output = [json.loads(line) for line in (await files.read("a", batch.output_file_id)).splitlines()]
        error = [json.loads(line) for line in (await files.read("a", batch.error_file_id)).splitlines()]
        store.close()
        files.close()
        return threading.get_ident(), batch, output, error

    loop_thread, batch, output, error = asyncio.run(finish())
    assert len(encoded_on) == 3 and loop_thread not in encoded_on
    assert [r["custom_id"] for r in output] == ["r1", "r3"] and [r["custom_id"] for r in error] == ["r2"]
    assert (batch.status, batch.completed, batch.failed) == ("completed", 2, 1)
    assert batch.usage["input_tokens"] == 10 and batch.usage["output_tokens"] == 4


def test_a_cancelled_batch_is_cancelling_until_cancelled_and_only_a_finished_one_is_finalizing():
    async def finish(final: str) -> tuple[list[str], dict]:
        store, files = BatchStore(None), FileStore(None)
        batch = Batch("batch_1", "a", "/v1/chat/completions", "file-1", "24h", 1, 86401, total=1)
        batch.moved_to("in_progress", 2)
        if final == "cancelled":
            batch.moved_to("cancelling", 3)
        seen = []
        put = store.put

        async def recording(stored):
            seen.append(stored.status)
            await put(stored)
        store.put = recording
        await finish_batch(store, files, batch, [_answer("r1", 200)], [], final, None, clock=lambda: 4.0)
        store.close()
        files.close()
        return seen, batch.as_object()

    seen, cancelled = asyncio.run(finish("cancelled"))
    assert seen == ["cancelled"] and cancelled["finalizing_at"] is None and cancelled["cancelled_at"] == 4
    seen, completed = asyncio.run(finish("completed"))
    assert seen == ["finalizing", "completed"] and completed["finalizing_at"] == 4
