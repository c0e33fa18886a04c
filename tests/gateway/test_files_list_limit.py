"""QA180 finding 2: `GET /v1/files` takes `limit` 1-10,000, default 10,000, as OpenAI's
reference gives it (so one `client.files.list()` holds every file), while the other lists
keep 1-100, default 20; a 10,000-file page is read in one query."""
from __future__ import annotations

import asyncio

import pytest
from starlette.testclient import TestClient

from gateway.app import build_app
from gateway.config import key_digest, parse_config
from gateway.errors import ApiError
from gateway.file_store import FileStore
from gateway.list_page import ListPage, list_page

KEY = "k-files-limit"
FILES_LIMIT = 10_000   # OpenAI's reference: "Limit can range between 1 and 10,000, and the default is 10,000"


def test_files_take_openais_bounds_and_the_other_lists_keep_theirs():
    from gateway import files_routes

    assert files_routes.FILES_LIMIT == FILES_LIMIT
    files = {"default_limit": FILES_LIMIT, "max_limit": FILES_LIMIT}
    assert list_page({}, **files).limit == 10_000 and list_page({"limit": "10000"}, **files).limit == 10_000
    with pytest.raises(ApiError) as past:
        list_page({"limit": "10001"}, **files)
    assert (past.value.param, past.value.code) == ("limit", "integer_above_max_value")
    assert "from 1 to 10000" in past.value.message
    assert list_page({}).limit == 20   # batches, conversation items, response input items
    with pytest.raises(ApiError) as other:
        list_page({"limit": "101"})
    assert "from 1 to 100," in other.value.message


def _config(tmp_path):
    return parse_config({"models": [{"name": "mock", "kind": "upstream", "litellm_model": "openai/gpt-4o-mini",
                                     "litellm_params": {"mock_response": "hi"}}],
                         "tenants": [{"name": "a", "api_key_sha256": [key_digest(KEY)]}],
                         "tracing": {"enabled": False},
                         "server": {"responses_db": str(tmp_path / "responses.sqlite3")}})


def test_one_files_list_holds_them_all_and_a_limit_past_100_is_taken(tmp_path):
    headers = {"Authorization": f"Bearer {KEY}"}
    with TestClient(build_app(_config(tmp_path))) as client:
        made = [client.post("/v1/files", headers=headers, files={"file": (f"f{n}.txt", b"x")},
                            data={"purpose": "user_data"}).json()["id"] for n in range(25)]
        listed = client.get("/v1/files", headers=headers).json()
        assert [f["id"] for f in listed["data"]] == made[::-1] and listed["has_more"] is False
        assert len(client.get("/v1/files", headers=headers, params={"limit": 1000}).json()["data"]) == 25
        refused = client.get("/v1/files", headers=headers, params={"limit": 10_001})
        assert refused.status_code == 400 and refused.json()["error"]["param"] == "limit"
        # the conversation items' list keeps OpenAI's 1-100 there
        conversation = client.post("/v1/conversations", headers=headers, json={}).json()["id"]
        items = client.get(f"/v1/conversations/{conversation}/items", headers=headers, params={"limit": 1000})
        assert items.status_code == 400 and items.json()["error"]["param"] == "limit"


def test_a_page_of_10000_files_is_read_in_one_query():
    store = FileStore(None, clock=lambda: 1000.0)
    statements: list[str] = []

    def fill_and_trace() -> None:   # on the store's thread, as its own calls are
        db = store._file.db
        db.executemany("INSERT INTO files (tenant, id, bytes, created_at, filename, purpose, expires_at, seq) "
                       "VALUES ('a', ?, 1, 5, 'x.txt', 'user_data', NULL, ?)",
                       ((f"file-{seq:024d}", seq) for seq in range(1, FILES_LIMIT + 2)))
        db.set_trace_callback(statements.append)

    try:
        asyncio.run(store._thread.call(fill_and_trace))
        page, more = asyncio.run(store.list("a", None, ListPage(limit=FILES_LIMIT)))
        assert len(page) == FILES_LIMIT and more and page[0].id == f"file-{FILES_LIMIT + 1:024d}"
        reads = [sql for sql in statements if sql.lstrip().upper().startswith("SELECT") and "FROM files" in sql]
        assert len(reads) == 2, statements   # the expired files' sweep, then the page itself
        assert "ORDER BY seq DESC LIMIT" in reads[1]
    finally:
        store.close()
