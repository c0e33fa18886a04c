"""A batch record a newer version wrote, with a key this version does not know, reads, and
the key survives this version's rewrite; a record it cannot read (no JSON object, a key
missing, a value of another type, another batch's) is answered as absent: never a 500,
never a failed start (QA196 F1: `Batch(**record)` raised a TypeError, so an unfinished
batch so written stopped the gateway's start and a finished one made the list a 500)."""
from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import time
from pathlib import Path

import httpx
import pytest

from gateway.app import build_app
from gateway.batch_index import SCHEMA as BATCH_SCHEMA
from gateway.batch_record import Batch, read_record, record_text
from gateway.batch_store import BatchStore
from gateway.config import key_digest, parse_config
from gateway.errors import ApiError
from gateway.list_page import ListPage
from tests.gateway.serving import start_server

NEWER = {"future_field": {"kept": [1, "two"]}, "priority": 3}   # what a newer version might add


def _record(batch_id: str, status: str = "completed", tenant: str = "a", **changes) -> dict:
    record = {**json.loads(record_text(Batch(batch_id, tenant, "/v1/chat/completions", "file-gone", "24h",
                                             int(time.time()), int(time.time()) + 86400, status=status))),
              **changes}
    return {key: value for key, value in record.items() if value is not ...}   # `...`: the key left out


def _index(path: Path, records: list[dict | str], tenant: str = "a") -> None:
    """A batch index holding `records` (a str: that text as the record, named by its position)."""
    db = sqlite3.connect(path)
    db.executescript(BATCH_SCHEMA)
    for seq, record in enumerate(records, 1):
        batch_id = record["id"] if isinstance(record, dict) else f"batch_bad{seq}"
        text = json.dumps(record) if isinstance(record, dict) else record
        db.execute("INSERT INTO batches VALUES (?, ?, ?, ?, ?)", (tenant, batch_id, 1, text, seq))
    db.commit()
    db.close()


def _stored(path: Path, batch_id: str) -> dict:
    with sqlite3.connect(path) as db:
        [(text,)] = db.execute("SELECT record FROM batches WHERE id = ?", (batch_id,)).fetchall()
    return json.loads(text)


def test_a_record_with_keys_this_version_lacks_reads_and_writes_them_back_as_they_were():
    record = {**_record("batch_1", "in_progress", total=4, metadata={"job": "x"}), **NEWER}
    batch = read_record(json.dumps(record))
    assert isinstance(batch, Batch)
    assert (batch.id, batch.status, batch.total, batch.metadata) == ("batch_1", "in_progress", 4, {"job": "x"})
    assert batch.newer_keys == NEWER
    batch.moved_to("completed", 7)
    assert json.loads(record_text(batch)) == {**record, "status": "completed", "times": {"completed_at": 7}}
    # a record without the fields later versions added (the first version's) reads with their defaults
    first = {key: value for key, value in record.items() if key not in ("model", "usage", "output_expires_after_s")}
    assert read_record(json.dumps(first)).output_expires_after_s is None


@pytest.mark.parametrize(("text", "why"), [
    ("{not json", "it is not JSON"),
    ('["batch_1"]', "it is not a JSON object"),
    (json.dumps(_record("batch_1", endpoint=...)), "it lacks 'endpoint'"),
    (json.dumps(_record("batch_1", total="4")), "its 'total' is not int"),
    (json.dumps(_record("batch_1", total=True)), "its 'total' is not int"),
    (json.dumps(_record("batch_1", metadata={"n": 1})), "its 'metadata' is not dict[str, str]"),
    (json.dumps(_record("batch_1", errors=[1])), "its 'errors' is not list[dict] | None"),
    (json.dumps(_record("batch_1", created_at=1.5)), "its 'created_at' is not int"),
], ids=["not-json", "array", "lacks-endpoint", "total-str", "total-bool", "metadata-int", "errors-int", "float"])
def test_an_unreadable_record_says_why_and_raises_nothing(text, why):
    assert read_record(text) == why


def test_the_store_reads_a_newer_versions_batches_keeps_their_keys_and_passes_over_unreadable_ones(tmp_path, caplog):
    records = [{**_record("batch_old"), **NEWER}, "{not json", {**_record("batch_run", "in_progress"), **NEWER},
               _record("batch_typed", "in_progress", total="4"), _record("batch_theirs", tenant="b"),
               _record("batch_new")]
    _index(tmp_path / "batches.sqlite3", records)
    caplog.set_level(logging.WARNING, "stepahead")

    async def check():
        store = BatchStore(tmp_path)
        try:
            assert [b.id for b in await store.unfinished()] == ["batch_run"]
            assert [b.id for b in await store.unfinished()] == ["batch_run"]   # (warned once)
            assert (await store.get("a", "batch_old")).as_object()["status"] == "completed"
            for batch_id in ("batch_bad2", "batch_typed", "batch_theirs"):
                with pytest.raises(ApiError) as absent:
                    await store.get("a", batch_id)
                assert absent.value.status == 404
            newest = ["batch_new", "batch_run", "batch_old"]
            assert [b.id for b in (await store.list("a", ListPage(limit=20)))[0]] == newest
            # pages of 1 read on past the unreadable ones, and an `after` naming one still pages on
            pages = [await store.list("a", ListPage(limit=1, after=after))
                     for after in (None, "batch_new", "batch_typed", "batch_run")]
            assert [([b.id for b in page], more) for page, more in pages] == [
                (["batch_new"], True), (["batch_run"], True), (["batch_run"], True), (["batch_old"], False)]
            running = (await store.unfinished())[0]
            running.moved_to("completed", 9)
            await store.put(running)   # this version rewrites it: the newer version's keys stay
            await store.put(await store.get("a", "batch_old"))
        finally:
            store.close()

    asyncio.run(check())
    assert _stored(tmp_path / "batches.sqlite3", "batch_run").items() >= {**NEWER, "status": "completed"}.items()
    assert _stored(tmp_path / "batches.sqlite3", "batch_old").items() >= NEWER.items()
    warned = [r.getMessage() for r in caplog.records if "cannot read" in r.getMessage()]
    assert len(warned) == 3 and all("answered as absent and not run" in line for line in warned)
    assert any("batch batch_typed of tenant 'a': its 'total' is not int" in line for line in warned)
    assert any("batch batch_theirs of tenant 'a': it names another batch" in line for line in warned)


def test_a_gateway_starts_on_an_unfinished_batch_a_newer_version_wrote_and_answers_every_batch(tmp_path):
    """The start's adoption reads the unfinished one (its input file is gone: it fails, and
    keeps the newer keys); the list and each batch are 200, an unreadable one a 404."""
    (tmp_path / "files").mkdir()
    index = tmp_path / "files" / "batches.sqlite3"
    _index(index, [{**_record("batch_old"), **NEWER}, {**_record("batch_run", "in_progress"), **NEWER},
                   _record("batch_typed", "in_progress", total="4")])
    config = parse_config({"server": {"responses_db": str(tmp_path / "responses.sqlite3")},
                           "models": [{"name": "up", "kind": "upstream", "litellm_model": "openai/gpt-4o-mini"}],
                           "tenants": [{"name": "a", "api_key_sha256": [key_digest("sk-a")]}]})
    server = start_server(build_app(config))
    try:
        with httpx.Client(base_url=f"{server.base_url}/v1", headers={"Authorization": "Bearer sk-a"}) as http:
            listed = http.get("/batches")
            assert listed.status_code == 200, listed.text
            assert [b["id"] for b in listed.json()["data"]] == ["batch_run", "batch_old"]
            assert http.get("/batches/batch_old").json()["status"] == "completed"
            deadline_s = time.monotonic() + 10
            while (run := http.get("/batches/batch_run").json())["status"] in ("validating", "in_progress",
                                                                                 "finalizing"):
                assert time.monotonic() < deadline_s, run
                time.sleep(0.05)
            assert run["status"] == "failed"   # its input file is gone: it was taken up, and ended
            typed = http.get("/batches/batch_typed")
            assert typed.status_code == 404 and typed.json()["error"]["code"] == "not_found"
    finally:
        server.stop()
    assert _stored(index, "batch_run").items() >= {**NEWER, "status": "failed"}.items()
    assert _stored(index, "batch_typed")["total"] == "4"   # not rewritten
