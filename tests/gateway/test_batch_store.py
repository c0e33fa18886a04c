"""The Batch API's store: records per tenant listed in the order made, results appended
and read back after a restart, a cut line left out, a result that cannot be written
kept as its request's error."""
import asyncio
import json

import pytest

from gateway.batch_store import Batch, BatchStore, summed_usage, written_form
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


def test_a_result_that_cannot_be_written_is_kept_as_its_requests_error(tmp_path):
    """A custom_id or body with an unpaired surrogate has no UTF-8 form: that result is
    written as its request's `unwritable_result` error, the others as they are."""
    async def main():
        store = BatchStore(tmp_path)
        good = {"id": "batch_req_1", "custom_id": "r1", "response": {"status_code": 200, "request_id": "x",
                                                                      "body": {"text": "é"}}, "error": None}
        bad_id = {**good, "custom_id": "bad\ud800id"}
        bad_body = {**good, "custom_id": "r3", "response": {**good["response"], "body": {"text": "\udfff"}}}
        kept = await store.append_results("b1", [good, bad_id, bad_body])
        assert kept[0] == good
        assert [(r["custom_id"], r["response"], r["error"]["code"]) for r in kept[1:]] == [
            ("bad\ud800id", None, "unwritable_result"), ("r3", None, "unwritable_result")]
        assert await store.results("b1") == kept
        (tmp_path / "batch_results" / "b1.jsonl").read_bytes().decode("utf-8")   # all of it UTF-8
        store.close()

    asyncio.run(main())


def test_a_line_cut_short_mid_character_reads_as_no_result_and_the_next_result_is_kept(tmp_path):
    async def main():
        store = BatchStore(tmp_path)
        await store.append_results("b1", [{"custom_id": "r1", "text": "é"}])
        with open(tmp_path / "batch_results" / "b1.jsonl", "ab") as out:
            out.write('{"custom_id": "r2", "text": "é'.encode()[:-1])   # died halfway through "é"
        assert [r["custom_id"] for r in await store.results("b1")] == ["r1"]
        await store.append_results("b1", [{"custom_id": "r2", "text": "again"}])
        assert [r["custom_id"] for r in await store.results("b1")] == ["r1", "r2"]
        store.close()

    asyncio.run(main())


def test_batches_made_in_one_second_list_in_the_order_made_and_pages_agree(tmp_path):
    """Known answer: ids whose order is not the order made, all at created_at 1; a batch
    rewritten later (its status) keeps its place."""
    ids = ["b7", "b2", "b9", "b1", "b5"]

    async def main():
        store = BatchStore(tmp_path)
        for batch_id in ids:
            await store.put(_batch(batch_id))
        await store.put(_batch("other", tenant="b"))
        await store.put(_batch("b2", status="completed"))   # rewritten: same place
        newest = [b.id for b in (await store.list("a", ListPage(limit=100)))[0]]
        oldest = [b.id for b in (await store.list("a", ListPage(limit=100, order="asc")))[0]]
        walked, after = [], None
        while True:
            page, more = await store.list("a", ListPage(limit=2, after=after))
            walked += [b.id for b in page]
            if not more:
                break
            after = page[-1].id
        asc_after, _ = await store.list("a", ListPage(limit=2, order="asc", after="b2"))
        store.close()
        return newest, oldest, walked, [b.id for b in asc_after]

    newest, oldest, walked, asc_after = asyncio.run(main())
    assert newest == walked == ids[::-1] and oldest == ids and asc_after == ["b9", "b1"]


def test_a_batch_index_of_the_first_version_numbers_its_batches_and_lists_new_ones_first(tmp_path):
    """Old rows are numbered by (created_at, id), once: a batch made after comes first even
    with an earlier created_at (a clock set back), and a second start keeps the order."""
    import sqlite3
    from dataclasses import asdict

    db = sqlite3.connect(tmp_path / "batches.sqlite3")
    db.executescript("""CREATE TABLE batches (tenant TEXT NOT NULL, id TEXT NOT NULL, created_at INTEGER NOT NULL,
        record TEXT NOT NULL, PRIMARY KEY (tenant, id));""")
    for batch in (_batch("old-b", created_at=5), _batch("old-a", created_at=5), _batch("old-c", created_at=3)):
        db.execute("INSERT INTO batches VALUES (?, ?, ?, ?)",
                   (batch.tenant, batch.id, batch.created_at, json.dumps(asdict(batch))))
    db.commit()
    db.close()

    async def listed(new_id: str | None) -> list[str]:
        store = BatchStore(tmp_path)
        if new_id is not None:
            await store.put(_batch(new_id, created_at=1))
        ids = [b.id for b in (await store.list("a", ListPage()))[0]]
        store.close()
        return ids

    assert asyncio.run(listed("new")) == ["new", "old-b", "old-a", "old-c"]
    assert asyncio.run(listed(None)) == ["new", "old-b", "old-a", "old-c"]


def test_usage_is_summed_from_whole_token_counts_and_odd_ones_count_nothing():
    """Known answer: a chat usage (3 in, 2 out, 1 cached) and a Responses usage (4 in, 5
    out); an upstream's odd usage (null, a string, a float, details a list) adds nothing
    instead of stopping the batch's finish."""
    def answered(usage) -> dict:
        return {"response": {"status_code": 200, "request_id": "", "body": {"usage": usage}}}

    results = [answered({"prompt_tokens": 3, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 1}}),
               answered({"input_tokens": 4, "output_tokens": 5}),
               answered({"prompt_tokens": "7", "completion_tokens": None, "prompt_tokens_details": [1]}),
               answered({"prompt_tokens": 1.5, "input_tokens_details": {"cached_tokens": True}}),
               answered("none"), {"response": {"status_code": 200, "request_id": "", "body": []}}]
    assert summed_usage(results) == {"input_tokens": 7, "input_tokens_details": {"cached_tokens": 1},
                                     "output_tokens": 7, "output_tokens_details": {"reasoning_tokens": 0},
                                     "total_tokens": 14}


def test_a_result_holding_unicode_line_breaks_reads_back_whole(tmp_path):
    """JSON leaves U+2028, U+2029 and U+0085 unescaped; the results file is split on "\\n"
    alone, so an answer holding them is still one result (not lost, its request not re-sent)."""
    async def main():
        store = BatchStore(tmp_path)
        result = {"custom_id": "r1", "response": {"status_code": 200, "body": {"text": "a\u2028b\u2029c\x85d"}}}
        await store.append_results("b1", [result, {"custom_id": "r2"}])
        read = await store.results("b1")
        store.close()
        return result, read

    result, read = asyncio.run(main())
    assert read == [result, {"custom_id": "r2"}]


def test_a_store_it_cannot_open_says_what_it_could_not_do_in_words(tmp_path):
    blocked = tmp_path / "a-file"
    blocked.write_text("not a directory")
    store = BatchStore(blocked / "batches")

    async def main():
        with pytest.raises(ApiError) as failed:
            await store.unfinished()
        return failed.value.message

    try:
        message = asyncio.run(main())
    finally:
        store.close()
    assert message.startswith("The batch store could not read the unfinished batches: ")


def test_a_result_line_is_one_line_to_every_line_reader():
    """JSON may hold U+0085, U+2028 and U+2029 raw in a string, but `str.splitlines` (and
    JavaScript) break lines at them: a model's answer holding one made a batch's output
    file unreadable line by line (the clean-clone run caught it on the tiny model's text)."""
    result = {"custom_id": "a", "response": {"status_code": 200, "body": {"text": "p\u2028q\x85r\u2029s é\u00a0"}}}
    kept, line = written_form(result)
    text = line.decode()
    assert kept is result and text.endswith("\n") and len(text.splitlines()) == 1
    assert "\\u2028" in text and "\\u0085" in text and "\\u2029" in text and "é" in text   # the rest stays raw
    assert json.loads(text) == result
