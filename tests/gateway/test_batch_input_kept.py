"""A batch's input survives the deletion of its file from the batch's creation (QA206 F1):
a batch waiting `validating` for a place holds no file open, only a hard link to the
file's bytes beside the batch records, so "upload, create, delete the input" runs every
request whether the batch started at once or waited, across a restart too; the link goes
when the batch ends, and at the next start for a batch that ended or has no record; where
no link can be made the batch reads its file by id, as before."""
import asyncio
import errno
import os


from gateway.auth import KeyRing
from gateway.batch_runner import BatchRunner
from gateway.batch_store import Batch, BatchStore
from gateway.config import TenantConfig
from gateway.file_store import FileStore
from tests.gateway.test_batch_running_cap import _app, _create


def _runner(store: BatchStore, files: FileStore) -> BatchRunner:
    return BatchRunner(store, files, lambda: KeyRing((TenantConfig("a", ()),)), concurrency=2,
                       running_per_tenant=lambda: 1)


async def _until(runner: BatchRunner, batch_id: str, status: str, timeout_s: float = 3) -> Batch:
    async with asyncio.timeout(timeout_s):
        while (found := runner.current(await runner.store.get("a", batch_id))).status != status:
            if found.status in ("completed", "failed", "cancelled", "expired"):
                raise AssertionError(f"{batch_id} ended {found.status}: {found.errors}")
            await asyncio.sleep(0.01)
    return found


async def _gone(path, timeout_s: float = 1) -> bool:
    """Whether `path` is gone within `timeout_s` (a batch's link goes just after its final status is kept)."""
    async with asyncio.timeout(timeout_s):
        while path.exists():
            await asyncio.sleep(0.01)
    return True


async def _two_batches(tmp_path):
    """A runner started over `tmp_path` (the files and the batches in one directory, as the
    app has them) with batch_1 and batch_2 of tenant "a" created, their requests held until
    `go` is set: (seen, go, files, runner, batch_1, batch_2)."""
    seen: list[str] = []
    go = asyncio.Event()
    files = FileStore(tmp_path)
    runner = _runner(BatchStore(tmp_path), files)
    await runner.start(_app(seen, go))
    first = await _create(runner, files, "a", "batch_1")
    second = await _create(runner, files, "a", "batch_2")
    return seen, go, files, runner, first, second


def test_a_waiting_batch_whose_input_is_deleted_runs_every_request_and_its_link_goes_when_it_ends(tmp_path):
    async def main():
        seen, go, files, runner, first, waiting = await _two_batches(tmp_path)
        assert (first.status, waiting.status) == ("in_progress", "validating")
        await files.delete("a", waiting.input_file_id)   # "upload, create, delete the input"
        assert not (tmp_path / waiting.input_file_id).exists()
        go.set()
        done = await _until(runner, "batch_2", "completed")
        assert (done.completed, done.failed, done.total, done.errors) == (3, 0, 3, None)
        assert seen.count("batch_2") == 3
        await _until(runner, "batch_1", "completed")
        assert await _gone(runner.store.input_link("batch_1")) and await _gone(runner.store.input_link("batch_2"))
        await runner.stop()
        runner.store.close()
        files.close()
    asyncio.run(main())


def test_inputs_deleted_before_a_restart_are_read_after_it(tmp_path):
    async def main():
        seen, go, files, runner, running, waiting = await _two_batches(tmp_path)
        await asyncio.sleep(0.1)
        for batch in (running, waiting):
            await files.delete("a", batch.input_file_id)
        await runner.stop()   # the gateway stops: batch_1 with no result, batch_2 still waiting
        runner.store.close()
        again = _runner(BatchStore(tmp_path), files)   # the next start
        await again.start(_app(seen, go))
        go.set()
        for name in ("batch_1", "batch_2"):
            done = await _until(again, name, "completed")
            assert (done.completed, done.failed, done.errors) == (3, 0, None)
            assert await _gone(again.store.input_link(name))
        await again.stop()
        again.store.close()
        files.close()
    asyncio.run(main())


def test_a_start_removes_the_links_of_batches_ended_or_unknown_and_keeps_those_going_on(tmp_path):
    async def main():
        store = BatchStore(tmp_path)
        going_on = Batch("batch_on", "a", "/v1/chat/completions", "file-x", "24h", 0, 10**10)
        ended = Batch("batch_ended", "a", "/v1/chat/completions", "file-y", "24h", 0, 10**10)
        ended.moved_to("completed", 1)
        for batch in (going_on, ended):
            await store.put(batch)
        store.close()
        (tmp_path / "input.jsonl").write_bytes(b"{}")
        for name in ("batch_on", "batch_ended", "batch_unknown"):   # left by a gateway killed before their ends
            store.input_link(name).parent.mkdir(exist_ok=True)
            os.link(tmp_path / "input.jsonl", store.input_link(name))
        again = BatchStore(tmp_path)   # the next start
        await again.unfinished()   # (after the start's sweeps, on the store's thread)
        assert sorted(path.name for path in again.input_link("x").parent.iterdir()) == ["batch_on"]
        again.close()
    asyncio.run(main())


def test_without_hard_links_a_batch_reads_its_file_by_id_as_before(tmp_path, monkeypatch):
    def no_links(*_args, **_kwargs):
        raise OSError(errno.EXDEV, "Invalid cross-device link")
    monkeypatch.setattr(os, "link", no_links)

    async def main():
        seen: list[str] = []
        go = asyncio.Event()
        files = FileStore(tmp_path)
        runner = _runner(BatchStore(tmp_path), files)
        await runner.start(_app(seen, go))
        await _create(runner, files, "a", "batch_1")
        waiting = await _create(runner, files, "a", "batch_2")
        assert waiting.status == "validating" and not runner.store.input_link("batch_2").exists()
        go.set()
        for name in ("batch_1", "batch_2"):
            assert (await _until(runner, name, "completed")).completed == 3
        await runner.stop()
        runner.store.close()
        files.close()
    asyncio.run(main())
