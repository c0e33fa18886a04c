"""The Batch API's store: records per tenant, results appended and read back after a
restart, a cut last line left out."""
import asyncio
import json

import pytest

from gateway.batch_store import Batch, BatchStore
from gateway.errors import ApiError
from gateway.list_page import ListPage


def _batch(batch_id: str, tenant: str = "a", created_at: int = 1, status: str = "in_progress") -> Batch:
    return Batch(batch_id, tenant, "/v1/chat/completions", "file-1", "24h", created_at, created_at + 86400,
                 status=status)


def test_batches_and_their_results_survive_a_restart(tmp_path):
    async def first_life():
        store = BatchStore(tmp_path)
        batch = _batch("b1")
        batch.moved_to("in_progress", 5)
        await store.put(batch)
        await store.put(_batch("b2", status="completed"))
        await store.put(_batch("b3", tenant="other", created_at=2))
        await store.append_results("b1", [{"custom_id": "r1"}, {"custom_id": "r2"}])
        store.close()
        with open(tmp_path / "batch_results" / "b1.jsonl", "a") as out:
            out.write('{"custom_id": "r3", "resp')   # the process died while writing it

    async def second_life():
        store = BatchStore(tmp_path)
        assert [b.id for b in await store.unfinished()] == ["b1", "b3"]
        found = await store.get("a", "b1")
        assert found.as_object()["in_progress_at"] == 5 and found.as_object()["request_counts"]["total"] == 0
        assert [r["custom_id"] for r in await store.results("b1")] == ["r1", "r2"]
        with pytest.raises(ApiError):
            await store.get("other", "b1")
        listed, more = await store.list("a", ListPage(limit=1))
        assert len(listed) == 1 and more
        await store.drop_results("b1")
        assert await store.results("b1") == []
        store.close()

    asyncio.run(first_life())
    asyncio.run(second_life())


def test_the_batch_object_has_openai_fields():
    batch = _batch("b")
    batch.moved_to("cancelling", 7)
    listed = batch.as_object()
    assert listed["object"] == "batch" and listed["cancelling_at"] == 7 and listed["completed_at"] is None
    assert json.dumps(listed) and set(listed["request_counts"]) == {"total", "completed", "failed"}
