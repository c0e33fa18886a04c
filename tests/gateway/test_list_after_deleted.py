"""QA180 finding 1: an `after` naming a file or a conversation item deleted (or a file
expired) since it was listed still says where the next page starts, so the SDK's
`for f in client.files.list(): client.files.delete(f.id)` deletes them all; an id its list
never had, another tenant's included, stays the same 400 (gateway/gone_cursors.py)."""
from __future__ import annotations

import asyncio
import sqlite3

import openai
import pytest
from starlette.testclient import TestClient

from gateway.app import build_app
from gateway.config import key_digest, parse_config
from gateway.conversation_archive import Conversation, ConversationArchive, Missing
from gateway.errors import ApiError
from gateway.file_store import FileStore
from gateway.list_page import ListPage

KEYS = {"a": "k-after-a", "b": "k-after-b"}


class Clock:
    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


def _item(n: int) -> dict:
    return {"type": "message", "id": f"msg_{n}", "status": "completed", "role": "user",
            "content": [{"type": "input_text", "text": str(n)}]}


def _unknown_after(call) -> ApiError:
    with pytest.raises(ApiError) as refused:
        asyncio.run(call)
    assert (refused.value.status, refused.value.param) == (400, "after")
    return refused.value


# --- the file store ------------------------------------------------------------------

def test_deleting_each_file_of_a_page_then_asking_after_its_last_lists_the_rest_in_both_orders(tmp_path):
    store = FileStore(tmp_path / "files", clock=Clock())
    try:
        async def made(count: int) -> list[str]:
            return [(await store.add_bytes("a", f"f{n}.txt", "user_data", b"x")).id for n in range(count)]

        async def delete_while_paging(order: str) -> list[str]:
            deleted, after = [], None
            while True:
                page, more = await store.list("a", None, ListPage(limit=4, order=order, after=after))
                for stored in page:
                    await store.delete("a", stored.id)
                deleted += [stored.id for stored in page]
                if not more:
                    return deleted
                after = page[-1].id

        ids = asyncio.run(made(10))
        assert asyncio.run(delete_while_paging("desc")) == ids[::-1]
        ids = asyncio.run(made(9))
        assert asyncio.run(delete_while_paging("asc")) == ids
        assert asyncio.run(store.list("a", None, ListPage()))[0] == []
    finally:
        store.close()


def test_a_gone_files_cursor_is_its_tenants_alone_and_an_id_never_made_stays_a_400(tmp_path):
    from gateway.gone_cursors import GONE_KEPT_S
    clock = Clock()
    store = FileStore(tmp_path / "files", clock=clock)
    try:
        first, second, third = (asyncio.run(store.add_bytes("a", f"{n}.txt", "user_data", b"x")) for n in range(3))
        asyncio.run(store.delete("a", second.id))
        rest, more = asyncio.run(store.list("a", None, ListPage(after=second.id)))
        assert [f.id for f in rest] == [first.id] and not more
        made_up = _unknown_after(store.list("a", None, ListPage(after="file-000000000000000000000000")))
        # another tenant: its gone file and its live one read as a made-up id (no existence leak)
        theirs = asyncio.run(store.add_bytes("b", "b.txt", "user_data", b"x"))
        asyncio.run(store.delete("b", theirs.id))
        for foreign in (second.id, third.id):
            assert _unknown_after(store.list("b", None, ListPage(after=foreign))).message == \
                made_up.message.replace("file-000000000000000000000000", foreign)
        assert _unknown_after(store.list("a", None, ListPage(after=theirs.id))).code == made_up.code
        # a cursor is kept GONE_KEPT_S, then forgotten (a 400 again)
        clock.now += GONE_KEPT_S + 1
        asyncio.run(store.list("a", None, ListPage()))   # a list sweeps the old cursors
        _unknown_after(store.list("a", None, ListPage(after=second.id)))
    finally:
        store.close()


def test_an_expired_file_is_a_place_to_list_after_before_and_after_its_record_is_removed(tmp_path):
    clock = Clock()
    store = FileStore(tmp_path / "files", clock=clock)
    try:
        older = asyncio.run(store.add_bytes("a", "older.txt", "user_data", b"x"))
        brief = asyncio.run(store.add_bytes("a", "brief.txt", "user_data", b"x", expires_after_s=60))
        newer = asyncio.run(store.add_bytes("a", "newer.txt", "user_data", b"x"))
        clock.now += 61
        for _ in range(2):   # the first list removes its record (keeping its cursor), the second reads that
            assert [f.id for f in asyncio.run(store.list("a", None, ListPage(after=brief.id)))[0]] == [older.id]
            assert [f.id for f in asyncio.run(store.list("a", None, ListPage(order="asc", after=brief.id)))[0]] \
                == [newer.id]
        assert not (store.root / brief.id).exists()
    finally:
        store.close()


def test_a_file_made_after_the_newest_was_deleted_lists_after_its_cursor(tmp_path):
    store = FileStore(tmp_path / "files", clock=Clock())
    try:
        asyncio.run(store.add_bytes("a", "old.txt", "user_data", b"x"))
        newest = asyncio.run(store.add_bytes("a", "newest.txt", "user_data", b"x"))
        asyncio.run(store.delete("a", newest.id))
        later = asyncio.run(store.add_bytes("a", "later.txt", "user_data", b"x"))   # never numbered where newest stood
        page, _ = asyncio.run(store.list("a", None, ListPage(order="asc", after=newest.id)))
        assert [f.id for f in page] == [later.id]
    finally:
        store.close()


def test_a_file_index_made_before_cursors_were_kept_gets_their_table_and_keeps_its_files(tmp_path):
    root = tmp_path / "files"
    store = FileStore(root, clock=Clock())
    kept = [asyncio.run(store.add_bytes("a", f"{n}.txt", "user_data", b"x")).id for n in range(3)]
    store.close()
    with sqlite3.connect(root / "files.sqlite3") as db:   # as an index of the version before
        db.execute("DROP TABLE file_cursors")
    store = FileStore(root, clock=Clock())
    try:
        asyncio.run(store.delete("a", kept[2]))
        page, _ = asyncio.run(store.list("a", None, ListPage(after=kept[2])))
        assert [f.id for f in page] == [kept[1], kept[0]]
    finally:
        store.close()


# --- the conversation archive --------------------------------------------------------

def test_deleting_each_item_of_a_page_then_asking_after_its_last_lists_the_rest_in_both_orders():
    clock = Clock()
    archive = ConversationArchive(None, 8, clock=clock)
    for order in ("desc", "asc"):
        archive.create("a", Conversation(f"c-{order}", 1, {}), [_item(n) for n in range(11)])
        deleted, after = [], None
        while True:
            page, more = archive.page("a", f"c-{order}", ListPage(limit=4, order=order, after=after))
            for item in page:
                archive.delete_item("a", f"c-{order}", item["id"])
            deleted += [item["id"] for item in page]
            if not more:
                break
            after = page[-1]["id"]
        expected = [f"msg_{n}" for n in range(11)]
        assert deleted == (expected[::-1] if order == "desc" else expected)
    archive.close()


def test_a_deleted_items_cursor_is_its_conversations_alone_and_is_numbered_past():
    from gateway.gone_cursors import GONE_KEPT_S
    clock = Clock()
    archive = ConversationArchive(None, 8, clock=clock)
    archive.create("a", Conversation("c1", 1, {}), [_item(n) for n in range(3)])
    archive.create("a", Conversation("c2", 1, {}), [_item(n) for n in range(3)])
    archive.create("b", Conversation("c1", 1, {}), [_item(9)])
    archive.delete_item("a", "c1", "msg_2")   # the newest: the next item is numbered past it
    archive.add_items("a", "c1", [_item(3)])
    page, _ = archive.page("a", "c1", ListPage(order="asc", after="msg_2"))
    assert [item["id"] for item in page] == ["msg_3"]
    page, _ = archive.page("a", "c1", ListPage(after="msg_2"))
    assert [item["id"] for item in page] == ["msg_1", "msg_0"]
    archive.delete_item("a", "c2", "msg_1")
    # another tenant's conversation of the same id, an id never made: unknown as before
    for tenant, conversation, item_id in (("b", "c1", "msg_2"), ("a", "c1", "msg_never")):
        with pytest.raises(Missing) as missing:
            archive.page(tenant, conversation, ListPage(after=item_id))
        assert missing.value.what == "item"
    archive.delete("a", "c1")   # its cursors go with it
    assert archive.db.execute("SELECT count(*) FROM conversation_item_cursors WHERE conversation = 'c1'"
                              ).fetchone() == (0,)
    clock.now += GONE_KEPT_S + 1
    archive.delete_item("a", "c2", "msg_0")   # a deletion sweeps the cursors kept past their time
    with pytest.raises(Missing):
        archive.page("a", "c2", ListPage(after="msg_1"))
    assert [item["id"] for item in archive.page("a", "c2", ListPage(after="msg_0"))[0]] == []
    archive.close()


def test_an_archive_made_before_cursors_were_kept_gets_their_table_and_keeps_its_items(tmp_path):
    path = tmp_path / "conversations.sqlite3"
    archive = ConversationArchive(path, 8, clock=Clock())
    archive.create("a", Conversation("c1", 1, {}), [_item(n) for n in range(3)])
    archive.close()
    with sqlite3.connect(path) as db:
        db.execute("DROP TABLE conversation_item_cursors")
    archive = ConversationArchive(path, 8, clock=Clock())
    archive.delete_item("a", "c1", "msg_1")
    assert [item["id"] for item in archive.page("a", "c1", ListPage(after="msg_1"))[0]] == ["msg_0"]
    archive.close()


# --- through the official SDK, in process --------------------------------------------

def _config(tmp_path):
    return parse_config({"models": [{"name": "mock", "kind": "upstream", "litellm_model": "openai/gpt-4o-mini",
                                     "litellm_params": {"mock_response": "hi"}}],
                         "tenants": [{"name": name, "api_key_sha256": [key_digest(key)]} for name, key in KEYS.items()],
                         "tracing": {"enabled": False},
                         "server": {"responses_db": str(tmp_path / "responses.sqlite3")}})


def test_the_sdks_delete_while_iterating_idiom_deletes_every_file_and_item(tmp_path):
    with TestClient(build_app(_config(tmp_path))) as http:
        client = openai.OpenAI(base_url="http://testserver/v1", api_key=KEYS["a"], http_client=http, max_retries=0)
        other = openai.OpenAI(base_url="http://testserver/v1", api_key=KEYS["b"], http_client=http, max_retries=0)
        for n in range(7):
            client.files.create(file=(f"f{n}.txt", b"x"), purpose="user_data")
        for stored in client.files.list(limit=3):   # pages of 3: the cursor is deleted by each next page
            client.files.delete(stored.id)
        assert client.files.list().data == []
        conversation = client.conversations.create(items=[{"role": "user", "content": str(n)} for n in range(7)])
        last = None
        for item in client.conversations.items.list(conversation.id, limit=3):
            client.conversations.items.delete(item.id, conversation_id=conversation.id)
            last = item.id
        assert client.conversations.items.list(conversation.id).data == []
        # another tenant naming a's gone item or file gets the 400 of an id never made
        with pytest.raises(openai.BadRequestError) as foreign:
            other.files.list(after=stored.id)
        assert foreign.value.code is not None and foreign.value.param == "after"
        with pytest.raises(openai.NotFoundError):
            other.conversations.items.list(conversation.id, after=last)
        with pytest.raises(openai.BadRequestError) as never:
            client.conversations.items.list(conversation.id, after="msg_never")
        assert never.value.param == "after"
