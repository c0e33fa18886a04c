"""Gateways sharing a state directory with different tenants: a gateway never holds the
claim of a batch whose tenant it lacks (not when it looks for batches to take up, not
while a reload removed the tenant), so a gateway that has the tenant runs it; a batch
waiting so goes on where the tenant is added back, and no result is lost or doubled."""
import asyncio
import json

from gateway.auth import KeyRing
from gateway.batch_claims import BatchClaims
from gateway.batch_store import Batch
from gateway.config import TenantConfig
from tests.gateway.test_batch_claims import Gateway, _ended, _has_sent, _lines, _until

WITH_A = (TenantConfig("a", ()), TenantConfig("b", ()))
WITHOUT_A = (TenantConfig("b", ()),)


def _free(gateway: Gateway, batch_id: str) -> bool:
    """Whether no process holds the batch's claim (a look that takes and gives it back)."""
    probe = BatchClaims(gateway.runner.claims.directory)
    if not probe.take(batch_id):
        return False
    probe.release(batch_id, finished=False)
    return True


async def _output(gateway: Gateway, batch_id: str) -> tuple[Batch, list[str]]:
    done = await gateway.status(batch_id)
    lines = (await gateway.files.read("a", done.output_file_id)).splitlines()
    return done, [json.loads(line)["custom_id"] for line in lines]


def test_a_gateway_without_the_tenant_leaves_a_stopped_gateways_batch_to_one_that_has_it(tmp_path):
    async def main():
        one, two = Gateway(tmp_path, KeyRing(WITH_A), 0.02), Gateway(tmp_path, KeyRing(WITHOUT_A), 0.02)
        await one.runner.start(one.app)
        upload = await one.files.add_bytes("a", "in.jsonl", "batch", _lines(40))
        batch = await one.runner.create(Batch("batch_g", "a", "/v1/chat/completions", upload.id, "24h", 0, 10**10))
        await _until(lambda: _has_sent(one, 4))
        await one.runner.stop()   # the gateway that has the tenant stops mid-batch
        await two.runner.start(two.app)   # its look at its start, as its periodic look does
        await asyncio.sleep(0.3)
        assert _free(two, batch.id)   # the gateway without the tenant did not take the claim
        again = Gateway(tmp_path, KeyRing(WITH_A), 0.02)   # the stopped gateway starts again
        await again.runner.start(again.app)
        await _until(lambda: _ended(again, batch.id), timeout_s=10)
        done, output = await _output(again, batch.id)
        await two.runner._adopt()   # its next look drops its wait for the batch that ended
        await asyncio.sleep(0.05)
        two_still_waits = bool(two.runner._tasks)
        await two.runner.stop()
        for gateway in (one, two, again):
            gateway.close()
        return done, output, one.sent, two.sent, again.sent, two_still_waits

    done, output, by_one, by_two, by_again, two_still_waits = asyncio.run(main())
    assert done.status == "completed" and done.completed == 40
    assert sorted(output) == sorted(f"r{n}" for n in range(40))   # once each
    assert by_two == [] and set(by_one) | set(by_again) == {f"r{n}" for n in range(40)}
    assert not two_still_waits


def test_a_reload_removing_the_tenant_lets_the_claim_go_to_a_gateway_that_has_it(tmp_path):
    async def main():
        ring = {"now": KeyRing(WITH_A)}
        one, two = Gateway(tmp_path, ring["now"], 0.02), Gateway(tmp_path, KeyRing(WITH_A), 0.02)
        one.runner.keys = lambda: ring["now"]
        await one.runner.start(one.app)
        upload = await one.files.add_bytes("a", "in.jsonl", "batch", _lines(60))
        batch = await one.runner.create(Batch("batch_h", "a", "/v1/chat/completions", upload.id, "24h", 0, 10**10))
        await _until(lambda: _has_sent(one, 4))
        await two.runner.start(two.app)   # leaves it alone: the first runs it
        assert two.sent == [] and not two.runner._tasks
        ring["now"] = KeyRing(WITHOUT_A, ring["now"].internal)   # a reload on the first removes "a"

        async def released() -> bool:
            return _free(one, batch.id)
        await _until(released, timeout_s=5)   # once its requests in flight are done
        sent_by_one = len(one.sent)
        await two.runner._adopt()   # what its periodic look does
        await _until(lambda: _ended(two, batch.id), timeout_s=10)
        ring["now"] = KeyRing(WITH_A, ring["now"].internal)   # the tenant is back on the first

        async def first_done() -> bool:
            return not one.runner._tasks
        await _until(first_done, timeout_s=5)   # it finds the batch ended, and leaves it so
        done, output = await _output(two, batch.id)
        for gateway in (one, two):
            gateway.close()
        return sent_by_one, done, output, one.sent, two.sent

    sent_by_one, done, output, by_one, by_two = asyncio.run(main())
    assert len(by_one) == sent_by_one   # nothing sent by the first once it let the claim go
    assert done.status == "completed" and done.completed == 60
    assert sorted(output) == sorted(f"r{n}" for n in range(60))   # once each
    assert sorted(by_one + by_two) == sorted(f"r{n}" for n in range(60))   # none sent twice


def test_a_batch_waiting_for_its_tenant_holds_no_claim_and_goes_on_when_a_reload_adds_it(tmp_path):
    async def main():
        ring = {"now": KeyRing(WITHOUT_A)}   # started without tenant "a"
        one = Gateway(tmp_path, ring["now"], 0.01)
        one.runner.keys = lambda: ring["now"]
        upload = await one.files.add_bytes("a", "in.jsonl", "batch", _lines(5))
        await one.runner.store.put(Batch("batch_w", "a", "/v1/chat/completions", upload.id, "24h", 0, 10**10,
                                         status="in_progress", total=5))
        await one.runner.start(one.app)
        await asyncio.sleep(0.3)
        free_while_waiting, sent_while_waiting = _free(one, "batch_w"), list(one.sent)
        ring["now"] = KeyRing(WITH_A, ring["now"].internal)   # a reload adds it
        await _until(lambda: _ended(one, "batch_w"), timeout_s=5)   # at once, not at the next periodic look
        done, output = await _output(one, "batch_w")
        one.close()
        return free_while_waiting, sent_while_waiting, done, output

    free_while_waiting, sent_while_waiting, done, output = asyncio.run(main())
    assert free_while_waiting and sent_while_waiting == []
    assert done.status == "completed" and sorted(output) == sorted(f"r{n}" for n in range(5))
