"""Gateways sharing a state directory run each batch once: a batch runs where it is
claimed, another gateway leaves it alone while that one runs it, takes it up once that
one stopped, and a cancel made on one gateway stops the batch running on the other."""
import asyncio
import json

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from gateway.auth import KeyRing
from gateway.batch_claims import BatchClaims
from gateway.batch_runner import BatchRunner
from gateway.batch_store import Batch, BatchStore
from gateway.config import TenantConfig
from gateway.file_store import FileStore

ENDED = ("completed", "expired", "cancelled", "failed")


def test_a_claim_is_held_by_one_holder_until_released_and_a_finished_ones_file_goes(tmp_path):
    first, second = BatchClaims(tmp_path / "claims"), BatchClaims(tmp_path / "claims")
    assert first.take("batch_1") and first.take("batch_1")   # taking again what one holds is a no-op
    assert not second.take("batch_1") and second.take("batch_2")
    first.release("batch_1", finished=False)
    assert (tmp_path / "claims" / "batch_1.lock").exists() and second.take("batch_1")
    second.release("batch_1", finished=True)
    assert not (tmp_path / "claims" / "batch_1.lock").exists() and first.take("batch_1")


def _lines(count: int) -> bytes:
    return "\n".join(json.dumps({"custom_id": f"r{n}", "method": "POST", "url": "/v1/chat/completions", "body": {
        "model": "m", "messages": [{"role": "user", "content": f"r{n}"}]}}) for n in range(count)).encode()


class Gateway:
    """A batch runner on the shared directory, its app answering after `delay_s` and
    recording what it was sent."""

    def __init__(self, root, keys: KeyRing, delay_s: float) -> None:
        self.sent: list[str] = []

        async def chat(request: Request):
            body = await request.json()
            self.sent.append(body["messages"][0]["content"])
            await asyncio.sleep(delay_s)
            return JSONResponse({"object": "chat.completion", "usage": {"prompt_tokens": 1, "completion_tokens": 1,
                                                                        "total_tokens": 2}})
        self.app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])
        self.files = FileStore(root / "files")
        self.runner = BatchRunner(BatchStore(root), self.files, lambda: keys, concurrency=2)

    async def status(self, batch_id: str) -> Batch:
        return self.runner.current(await self.runner.store.get("a", batch_id))

    def close(self) -> None:
        self.runner.store.close()
        self.files.close()


async def _until(condition, timeout_s: float = 20.0) -> None:
    deadline_s = asyncio.get_running_loop().time() + timeout_s
    while not await condition():
        assert asyncio.get_running_loop().time() < deadline_s
        await asyncio.sleep(0.01)


async def _shared(tmp_path, count: int):
    keys = KeyRing((TenantConfig("a", ()),))
    one, two = Gateway(tmp_path, keys, 0.02), Gateway(tmp_path, keys, 0.02)
    await one.runner.start(one.app)
    upload = await one.files.add_bytes("a", "in.jsonl", "batch", _lines(count))
    batch = await one.runner.create(Batch("batch_7", "a", "/v1/chat/completions", upload.id, "24h", 0, 10**10))
    await _until(lambda: _has_sent(one, 4))
    await two.runner.start(two.app)   # the second gateway starts while the first runs the batch
    return one, two, batch


async def _has_sent(gateway: Gateway, count: int) -> bool:
    return len(gateway.sent) >= count


def test_a_second_gateway_leaves_a_running_batch_alone_and_takes_it_up_once_the_first_stops(tmp_path):
    async def main():
        one, two, batch = await _shared(tmp_path, 60)
        await asyncio.sleep(0.2)
        sent_by_two_while_one_ran = list(two.sent)
        await one.runner.stop()   # stopped mid-batch: its claim goes with its run
        assert (await two.status(batch.id)).status == "in_progress"
        await two.runner._adopt()   # what its periodic look does
        await _until(lambda: _ended(two, batch.id))
        done = await two.status(batch.id)
        output = [json.loads(line) for line in (await two.files.read("a", done.output_file_id)).splitlines()]
        one.close()
        two.close()
        return sent_by_two_while_one_ran, one.sent, two.sent, done, output

    while_one_ran, by_one, by_two, done, output = asyncio.run(main())
    assert while_one_ran == []
    assert done.status == "completed" and done.completed == 60
    assert sorted(line["custom_id"] for line in output) == sorted(f"r{n}" for n in range(60))   # once each
    assert set(by_one) | set(by_two) == {f"r{n}" for n in range(60)}
    assert len(by_one) + len(by_two) <= 60 + 2   # at most the requests in flight at the stop go again


async def _ended(gateway: Gateway, batch_id: str) -> bool:
    return (await gateway.status(batch_id)).status in ENDED


def test_a_cancel_made_on_another_gateway_stops_the_batch_where_it_runs(tmp_path):
    async def main():
        one, two, batch = await _shared(tmp_path, 200)
        cancelling = await two.runner.cancel(await two.runner.store.get("a", batch.id))
        assert cancelling.status == "cancelling" and not two.runner._tasks   # not run here
        await asyncio.sleep(0.1)   # the first gateway's progress does not undo the cancel (it sees it: QA231 F1)
        assert (await two.runner.store.get("a", batch.id)).status in ("cancelling", "cancelled")
        await one.runner._adopt()   # what its periodic look does
        await _until(lambda: _ended(one, batch.id))
        done = await one.status(batch.id)
        one.close()
        two.close()
        return done, one.sent, two.sent

    done, by_one, by_two = asyncio.run(main())
    assert done.status == "cancelled" and done.completed < 200 and by_two == []
    assert len(by_one) < 200
