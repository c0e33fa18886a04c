"""QA231 F1: a cancel made on one gateway of a batch another gateway sharing `files/` runs.
The runner stops sending as soon as it sees the store's `cancelling` record (its next
result kept, a retrieve, its end, or its look every `cancel_look_s`), answers `cancelling`
meanwhile with the cancel's `cancelling_at`, and the batch ends `cancelled` with the files
of what finished, never `completed`; the store keeps a cancel whatever the runner writes."""
import asyncio
import json

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from gateway.auth import KeyRing
from gateway.batch_runner import BatchRunner
from gateway.batch_store import Batch, BatchStore
from gateway.config import TenantConfig
from gateway.file_store import FileStore
from tests.gateway.test_batch_claims import ENDED, _lines, _until

NEVER_S = 10**6   # a look period no test reaches: the other ways of seeing the cancel are tested alone


class Gateway:
    """A batch runner on the shared directory; its app records what it was sent and answers
    after `delay_s`, or, with `hold`, once `released` is set."""

    def __init__(self, root, keys: KeyRing, delay_s: float = 0.01, hold: bool = False,
                 cancel_look_s: float = NEVER_S) -> None:
        self.sent: list[str] = []
        self.released = asyncio.Event()

        async def chat(request: Request):
            body = await request.json()
            self.sent.append(body["messages"][0]["content"])
            await (self.released.wait() if hold else asyncio.sleep(delay_s))
            return JSONResponse({"object": "chat.completion", "usage": {"prompt_tokens": 1, "completion_tokens": 1,
                                                                        "total_tokens": 2}})
        self.app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])
        self.files = FileStore(root / "files")
        self.runner = BatchRunner(BatchStore(root, clock=lambda: 1000.0), self.files, lambda: keys, concurrency=2,
                                  clock=lambda: 1000.0)
        self.runner.cancel_look_s = cancel_look_s

    async def status(self, batch_id: str) -> Batch:
        """What a retrieve on this gateway answers."""
        return self.runner.current(await self.runner.store.get("a", batch_id))

    async def cancel(self, batch_id: str) -> Batch:
        """What a cancel on this gateway answers, made at a later time than the runner's clock."""
        self.runner.clock = lambda: 2000.0
        return await self.runner.cancel(await self.runner.store.get("a", batch_id))

    def close(self) -> None:
        self.runner.store.close()
        self.files.close()


async def _two(tmp_path, count: int, **runner):
    """A batch of `count` lines running on the first gateway, a second gateway beside it."""
    keys = KeyRing((TenantConfig("a", ()),))
    one, two = Gateway(tmp_path, keys, **runner), Gateway(tmp_path, keys)
    await one.runner.start(one.app)
    await two.runner.start(two.app)
    upload = await one.files.add_bytes("a", "in.jsonl", "batch", _lines(count))
    batch = await one.runner.create(Batch("batch_7", "a", "/v1/chat/completions", upload.id, "24h", 0, 10**10))
    await _until(lambda: _has_sent(one, 2 if runner.get("hold") else 4))   # (held: its two in flight)
    return one, two, batch


async def _has_sent(gateway: Gateway, count: int) -> bool:
    return len(gateway.sent) >= count


async def _ended(gateway: Gateway, batch_id: str) -> bool:
    return (await gateway.status(batch_id)).status in ENDED


async def _output_lines(gateway: Gateway, file_id: str | None) -> list[dict]:
    return [] if file_id is None else [json.loads(line) for line in (await gateway.files.read("a", file_id)
                                                                        ).splitlines()]


def test_a_cancel_made_on_another_gateway_ends_the_batch_cancelled_at_the_runners_next_result(tmp_path):
    """The QA's run: 60 lines, the runner's 30 s look never reached; it ended `completed`
    with every line sent and `cancelling_at` null."""
    async def main():
        one, two, batch = await _two(tmp_path, 60)
        cancelling = await two.cancel(batch.id)
        sent_at_cancel = len(one.sent)
        await _until(lambda: _ended(two, batch.id), timeout_s=10)   # (not a retrieve on the runner: that sees it)
        done_one, done_two = await one.status(batch.id), await two.status(batch.id)
        output = await _output_lines(one, done_one.output_file_id)
        one.close()
        two.close()
        return cancelling, sent_at_cancel, one.sent, two.sent, done_one, done_two, output

    cancelling, sent_at_cancel, by_one, by_two, done_one, done_two, output = asyncio.run(main())
    assert cancelling.status == "cancelling" and cancelling.times["cancelling_at"] == 2000 and by_two == []
    assert done_one.as_object() == done_two.as_object()
    assert done_one.status == "cancelled" and done_one.completed < 60
    assert done_one.times["cancelling_at"] == 2000 and "completed_at" not in done_one.times   # the cancel's time
    assert len(by_one) <= sent_at_cancel + 2   # at most the requests already on their way when it was cancelled
    assert done_one.completed + done_one.failed == len(output) and 2 <= done_one.completed <= len(by_one)


def test_a_retrieve_on_the_running_gateway_answers_cancelling_and_stops_its_requests(tmp_path):
    """Its requests hang: no result comes to tell the runner; a retrieve there reads the
    store's record, which says `cancelling` (it answered `in_progress` from its memory)."""
    async def main():
        one, two, batch = await _two(tmp_path, 20, hold=True)
        await two.cancel(batch.id)
        seen_on_one, seen_on_two = await one.status(batch.id), await two.status(batch.id)
        statuses = (seen_on_one.status, seen_on_one.times.get("cancelling_at"), seen_on_two.status)
        await _until(lambda: _ended(one, batch.id), timeout_s=10)   # its hanging requests given up
        done = await two.status(batch.id)
        one.released.set()
        one.close()
        two.close()
        return statuses, one.sent, done

    statuses, by_one, done = asyncio.run(main())
    assert statuses == ("cancelling", 2000, "cancelling")
    assert len(by_one) == 2   # the two in flight (concurrency 2); none sent after
    assert done.status == "cancelled" and (done.completed, done.failed) == (0, 0)
    assert done.times["cancelling_at"] == 2000 and done.output_file_id is None


def test_the_running_gateway_sees_a_cancel_made_elsewhere_within_its_look_period(tmp_path):
    """No result and no retrieve: its look every `cancel_look_s` (1 s; 30 s before) stops it."""
    async def main():
        one, two, batch = await _two(tmp_path, 20, hold=True, cancel_look_s=0.05)
        await two.cancel(batch.id)
        started_s = asyncio.get_running_loop().time()
        while one.runner._tasks:   # (not a retrieve on the runner: that alone would see the cancel)
            assert asyncio.get_running_loop().time() - started_s < 5
            await asyncio.sleep(0.01)
        done = await two.status(batch.id)
        one.released.set()
        one.close()
        two.close()
        return done, one.sent

    done, by_one = asyncio.run(main())
    assert done.status == "cancelled" and done.times["cancelling_at"] == 2000 and len(by_one) == 2


def test_the_store_keeps_a_cancel_made_elsewhere_whatever_the_runner_writes_after(tmp_path):
    """The runner's writes before it sees the cancel: its progress is kept with its counts
    (they never go backwards) but stays `cancelling`; its `finalizing` too; its `completed`
    is the `cancelled` end, with the cancel's `cancelling_at`; nothing moves a `cancelled`
    batch, and a cancel that comes after the end changes nothing."""
    async def main():
        runner_store, other_store = BatchStore(tmp_path), BatchStore(tmp_path)
        seen = []

        async def put(store: BatchStore, batch: Batch) -> None:   # then what the other gateway reads
            kept = await store.put(batch)
            seen.append(await (other_store if store is runner_store else runner_store).get("a", batch.id))
            assert kept == seen[-1]   # (what the store now holds: where the runner sees the cancel)
        running = Batch("batch_1", "a", "/v1/chat/completions", "file-1", "24h", 0, 10**10, {"k": "é"}, total=5)
        running.moved_to("in_progress", 10)
        await runner_store.put(running)
        cancelled = await other_store.get("a", "batch_1")
        cancelled.moved_to("cancelling", 20)
        await put(other_store, cancelled)
        running.completed = 3
        await put(runner_store, running)
        running.moved_to("finalizing", 30)
        await put(runner_store, running)
        running.completed, running.failed = 4, 1
        running.moved_to("completed", 31)
        await put(runner_store, running)
        running.moved_to("in_progress", 40)
        await put(runner_store, running)
        ended = Batch("batch_2", "a", "/v1/chat/completions", "file-1", "24h", 0, 10**10)
        ended.moved_to("completed", 50)
        await runner_store.put(ended)
        late = await other_store.get("a", "batch_2")
        late.moved_to("cancelling", 60)
        await put(other_store, late)
        runner_store.close()
        other_store.close()
        return seen

    seen = asyncio.run(main())
    assert [(b.status, b.completed, b.failed) for b in seen] == [
        ("cancelling", 0, 0), ("cancelling", 3, 0), ("cancelling", 3, 0), ("cancelled", 4, 1), ("cancelled", 4, 1),
        ("completed", 0, 0)]
    assert [b.times for b in seen[:5]] == [{"in_progress_at": 10, "cancelling_at": 20}] * 3 + [
        {"in_progress_at": 10, "cancelling_at": 20, "cancelled_at": 31}] * 2
    assert seen[3].metadata == {"k": "é"}


def test_a_cancel_made_on_the_running_gateway_is_as_before(tmp_path):
    async def main():
        one, two, batch = await _two(tmp_path, 60)
        cancelling = (await one.cancel(batch.id)).status   # (the running record: it ends cancelled after)
        await _until(lambda: _ended(one, batch.id), timeout_s=10)
        done = await two.status(batch.id)
        one.close()
        two.close()
        return cancelling, done

    cancelling, done = asyncio.run(main())
    assert cancelling == "cancelling" and done.status == "cancelled" and done.times["cancelling_at"] == 2000
