"""A batch finished again after a crash between its files and its final status (QA121 L1):
it keeps one output and one error file, the ones written before when they hold the same
bytes, and nothing else of it is listed or counted against its tenant's cap."""
import asyncio

import pytest

from gateway.batch_finish import finish_batch
from gateway.batch_lines import BatchRequest
from gateway.batch_store import Batch, BatchStore, request_result
from gateway.file_store import FileStore
from gateway.list_page import ListPage


class Killed(BaseException):
    """The process dying at the final status write (a kill -9 while the store was locked)."""


def _answer(custom_id: str, status: int) -> dict:
    body = {"usage": {"prompt_tokens": 5, "completion_tokens": 2}} if status == 200 else {"error": {"code": "x"}}
    return request_result(custom_id, status, body, f"req-{custom_id}", None)


async def _finish_killed_then_again(root, unsent: list[BatchRequest]) -> tuple[list, list, Batch, int]:
    """Finish a batch, killed at its final status; finish it again as a restarted gateway
    does (its record and results read back). The files listed after each, the batch, and
    the bytes counted against its tenant."""
    store, files = BatchStore(root), FileStore(root)
    batch = Batch("batch_1", "a", "/v1/chat/completions", "file-in", "24h", 1, 86401, total=3 + len(unsent),
                  output_expires_after_s=7200)
    batch.moved_to("in_progress", 2)
    await store.put(batch)
    await store.append_results(batch.id, [_answer("r1", 200), _answer("r2", 400), _answer("r3", 200)])
    put = store.put

    async def killed_at_the_final_status(stored: Batch) -> None:
        if stored.status not in ("finalizing", "in_progress"):
            raise Killed()
        await put(stored)
    store.put = killed_at_the_final_status
    with pytest.raises(Killed):
        await finish_batch(store, files, batch, await store.results(batch.id), unsent, "completed", None,
                           clock=lambda: 3.0)
    store.put = put
    first = (await files.list("a", None, ListPage(limit=100)))[0]
    again = await store.get("a", batch.id)
    await finish_batch(store, files, again, await store.results(batch.id), unsent, "completed", None,
                       clock=lambda: 4.0)
    second = (await files.list("a", None, ListPage(limit=100)))[0]
    held = await files.stored_bytes("a")
    store.close()
    files.close()
    return first, second, again, held


def test_a_batch_finished_again_reuses_its_output_and_error_files(tmp_path):
    first, second, batch, held = asyncio.run(_finish_killed_then_again(tmp_path, []))
    assert len(first) == 2   # both files were written before the kill
    assert sorted(f.id for f in second) == sorted(f.id for f in first) == sorted(
        [batch.output_file_id, batch.error_file_id])
    assert (batch.status, batch.completed, batch.failed) == ("completed", 2, 1)
    assert held == sum(f.bytes for f in first)
    assert all(f.expires_at == f.created_at + 7200 for f in second)


def test_a_file_that_differs_from_the_one_written_before_replaces_it(tmp_path):
    # an expired batch's `batch_expired` lines get new ids each time: its error file is written anew
    first, second, batch, held = asyncio.run(_finish_killed_then_again(
        tmp_path, [BatchRequest("r4", {"model": "tiny"})]))
    assert len(first) == len(second) == 2
    assert sorted(f.id for f in second) == sorted([batch.output_file_id, batch.error_file_id])
    assert batch.output_file_id in {f.id for f in first} and batch.error_file_id not in {f.id for f in first}
    assert (batch.status, batch.failed) == ("expired", 2)
    assert held == sum(f.bytes for f in second)
    assert sorted(p.name for p in tmp_path.glob("file-*")) == sorted(f.id for f in second)


def test_copies_left_by_an_earlier_version_are_removed_when_the_batch_finishes(tmp_path):
    async def main():
        files = FileStore(tmp_path)
        copies = [await files.add_bytes("a", "batch_1_output.jsonl", "batch_output", b"{}\n") for _ in range(2)]
        upload = await files.add_bytes("a", "batch_1_output.jsonl", "user_data", b"{}\n")   # a tenant's own
        kept = await files.add_output("a", "batch_1_output.jsonl", "batch_output", b"{}\n")
        listed = (await files.list("a", None, ListPage(limit=100)))[0]
        files.close()
        return copies, upload, kept, listed

    copies, upload, kept, listed = asyncio.run(main())
    assert kept.id == copies[0].id
    assert sorted(f.id for f in listed) == sorted([copies[0].id, upload.id])
    assert not (tmp_path / copies[1].id).exists()
