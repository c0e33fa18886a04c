"""The response archive keeps each chat message once per tenant (`gateway.response_messages`,
QA185 F2): a `previous_response_id` chain's file grows with each turn's new messages, each
turn reads back exactly, and the reference counts free what no row uses any more."""
from __future__ import annotations

import gc
import json
import sqlite3

from gateway.response_archive import ResponseArchive
from gateway.response_store import StoredResponse

TURN = 64 * 1024   # the bytes of each turn's input
# the responses table as versions before `message_ids` made it
OLD_SCHEMA = """
CREATE TABLE responses (tenant TEXT NOT NULL, id TEXT NOT NULL, used_s REAL NOT NULL, response TEXT NOT NULL,
    messages TEXT NOT NULL, input_items TEXT NOT NULL, PRIMARY KEY (tenant, id));
CREATE INDEX responses_by_use ON responses (tenant, used_s);
"""


def _turn(history: tuple[dict, ...], name: str, size: int = 16) -> StoredResponse:
    """Turn `name` after `history`: its input (`size` characters), then its reply."""
    text = (name + " ") * (size // (len(name) + 1))
    messages = (*history, {"role": "user", "content": text}, {"role": "assistant", "content": f"reply {name}"})
    return StoredResponse({"id": name, "status": "completed", "output": [{"text": f"reply {name}"}]}, messages,
                          ({"type": "message", "role": "user", "content": text},))


def _chain(archive: ResponseArchive, names: list[str], tenant: str = "a", size: int = 16) -> list[StoredResponse]:
    turns, history = [], ()
    for name in names:
        turn = _turn(history, name, size)
        archive.put(tenant, turn)
        turns.append(turn)
        history = turn.messages
    return turns


def _file_bytes(archive: ResponseArchive) -> int:
    archive.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return archive.path.stat().st_size


def _messages(archive: ResponseArchive, tenant: str = "a") -> dict[str, int]:
    """The tenant's kept messages, with their reference counts: a turn's input by its name."""
    kept = {}
    for text, refs in archive.db.execute("SELECT message, refs FROM response_messages WHERE tenant = ?", (tenant,)):
        message = json.loads(text)
        kept[message["content"].split()[0] if message["role"] == "user" else message["content"]] = refs
    return kept


def _assert_counts_match_rows(archive: ResponseArchive) -> None:
    """Every message's `refs` is the number of its tenant's rows naming it; none is unused."""
    counted = dict(((tenant, key), refs) for tenant, key, refs in archive.db.execute(
        "SELECT tenant, id, refs FROM response_messages"))
    named: dict[tuple[str, int], int] = {}
    for tenant, ids in archive.db.execute("SELECT tenant, message_ids FROM responses WHERE message_ids IS NOT NULL"):
        for key in set(json.loads(ids)):
            named[(tenant, key)] = named.get((tenant, key), 0) + 1
    assert counted == named


def test_a_chain_of_large_turns_grows_the_file_linearly_and_every_turn_reads_back_exactly(tmp_path):
    """12 turns of 64 KiB each: the old rows kept each turn's whole conversation (the last
    six turns added about 57 turns' bytes); now each adds its own input (its message and
    its input item) and reply."""
    path = tmp_path / "responses.sqlite3"
    archive = ResponseArchive(path, 64)
    names = [f"t{n}" for n in range(12)]
    turns = _chain(archive, names[:6], size=TURN)
    half = _file_bytes(archive)
    history = turns[-1].messages
    for name in names[6:]:
        turns.append(_turn(history, name, TURN))
        archive.put("a", turns[-1])
        history = turns[-1].messages
    grown = _file_bytes(archive) - half
    assert grown < 6 * 2 * TURN * 1.25, grown   # six turns, each its input twice (message, input item)
    archive.close()
    again = ResponseArchive(path, 64)   # a restart: read from the file
    for turn in turns:
        read = again.get("a", turn.response["id"])
        assert read == turn and list(read.messages) == list(turn.messages)
        assert [list(m.items()) for m in read.messages] == [list(m.items()) for m in turn.messages]   # key order too
    again.close()


def test_a_chain_read_back_shares_its_messages_in_memory(tmp_path):
    """Each row was parsed whole: a chain read back after a restart held each turn's whole
    conversation again. Now each message is one object while any response holds it."""
    path = tmp_path / "responses.sqlite3"
    archive = ResponseArchive(path, 64)
    _chain(archive, ["r1", "r2", "r3"])
    archive.close()
    archive = ResponseArchive(path, 64)
    read = [archive.get("a", name) for name in ("r1", "r2", "r3")]
    assert all(a is b for a, b in zip(read[0].messages, read[2].messages))
    assert all(a is b for a, b in zip(read[1].messages, read[2].messages))
    assert len({id(m) for turn in read for m in turn.messages}) == 6
    del read
    gc.collect()
    assert len(archive._messages._held) == 0   # held weakly: gone with the responses
    archive.close()


def test_deleting_a_response_frees_only_the_messages_no_other_row_uses(tmp_path):
    archive = ResponseArchive(tmp_path / "responses.sqlite3", 64)
    turns = _chain(archive, ["r1", "r2", "r3", "r4", "r5"])
    assert _messages(archive) == {"r1": 5, "reply r1": 5, "r2": 4, "reply r2": 4, "r3": 3, "reply r3": 3,
                                  "r4": 2, "reply r4": 2, "r5": 1, "reply r5": 1}
    assert archive.delete("a", "r3")   # the middle of the chain: its messages are the later turns' too
    assert _messages(archive) == {"r1": 4, "reply r1": 4, "r2": 3, "reply r2": 3, "r3": 2, "reply r3": 2,
                                  "r4": 2, "reply r4": 2, "r5": 1, "reply r5": 1}
    assert archive.get("a", "r4") == turns[3] and archive.get("a", "r5") == turns[4]
    assert archive.delete("a", "r5")
    assert _messages(archive) == {"r1": 3, "reply r1": 3, "r2": 2, "reply r2": 2, "r3": 1, "reply r3": 1,
                                  "r4": 1, "reply r4": 1}
    _assert_counts_match_rows(archive)
    for name in ("r1", "r2", "r4"):
        assert archive.delete("a", name)
    assert _messages(archive) == {}
    archive.close()


def test_a_trim_frees_the_messages_of_the_rows_it_deletes(tmp_path):
    archive = ResponseArchive(tmp_path / "responses.sqlite3", 3, clock=iter(range(100)).__next__)
    turns = _chain(archive, ["r1", "r2", "r3", "r4", "r5", "r6"])
    assert [archive.get("a", t.response["id"]) == t for t in turns] == [False] * 3 + [True] * 3
    assert _messages(archive) == {"r1": 3, "reply r1": 3, "r2": 3, "reply r2": 3, "r3": 3, "reply r3": 3,
                                  "r4": 3, "reply r4": 3, "r5": 2, "reply r5": 2, "r6": 1, "reply r6": 1}
    for name in ("x1", "x2", "x3"):   # separate conversations: they push the chain out
        archive.put("a", _turn((), name))
    assert _messages(archive) == {"x1": 1, "reply x1": 1, "x2": 1, "reply x2": 1, "x3": 1, "reply x3": 1}
    _assert_counts_match_rows(archive)
    archive.close()


def test_a_background_rows_replacements_and_a_put_over_a_row_count_their_messages(tmp_path):
    archive = ResponseArchive(tmp_path / "responses.sqlite3", 8)
    queued = {"id": "bg", "status": "queued", "background": True}
    archive.put("a", StoredResponse(queued, ()))
    done = _turn((), "bg")
    assert archive.put("a", done, replacing=True)
    assert _messages(archive) == {"bg": 1, "reply bg": 1}
    assert archive.put("a", StoredResponse({**done.response, "status": "failed"}, (), done.input_items),
                       replacing=True)
    assert _messages(archive) == {}
    archive.put("a", done)   # stored over (a put made again, a killed run's row ended)
    archive.put("a", done)
    assert _messages(archive) == {"bg": 1, "reply bg": 1} and archive.get("a", "bg") == done
    assert archive.delete("a", "bg")
    assert not archive.put("a", done, replacing=True)   # deleted meanwhile: nothing comes back
    assert _messages(archive) == {} and archive.get("a", "bg") is None
    archive.close()


def test_tenants_keep_their_own_copy_of_the_same_message(tmp_path):
    archive = ResponseArchive(tmp_path / "responses.sqlite3", 8)
    [mine] = _chain(archive, ["same"], tenant="a")
    [theirs] = _chain(archive, ["same"], tenant="b")
    assert mine == theirs and _messages(archive, "a") == _messages(archive, "b") == {"same": 1, "reply same": 1}
    assert archive.db.execute("SELECT count(*) FROM response_messages").fetchone() == (4,)
    assert archive.delete("b", "same") and _messages(archive, "b") == {}
    assert archive.get("a", "same") == mine and _messages(archive, "a") == {"same": 1, "reply same": 1}
    assert archive.get("b", "same") is None
    _assert_counts_match_rows(archive)
    archive.close()


def test_rows_an_older_version_wrote_are_read_and_continued(tmp_path):
    path = tmp_path / "responses.sqlite3"
    old = sqlite3.connect(path)
    old.executescript(OLD_SCHEMA)
    first = _turn((), "r1")
    old.execute("INSERT INTO responses VALUES ('a', 'r1', 1.0, ?, ?, ?)",
                (json.dumps(first.response), json.dumps(first.messages), json.dumps(first.input_items)))
    old.commit()
    old.close()
    archive = ResponseArchive(path, 8)
    assert archive.get("a", "r1") == first
    second = _turn(archive.get("a", "r1").messages, "r2")
    archive.put("a", second)
    assert archive.delete("a", "r1") and archive.get("a", "r2") == second
    assert _messages(archive) == {"r1": 1, "reply r1": 1, "r2": 1, "reply r2": 1}
    _assert_counts_match_rows(archive)
    archive.close()


def test_a_row_this_version_writes_is_damaged_to_an_older_one(tmp_path):
    """An older version reads `messages` as the whole conversation (`tuple(json.loads(...))`)
    and treats a row it cannot read as absent: never a response continued with no history."""
    archive = ResponseArchive(tmp_path / "responses.sqlite3", 8)
    _chain(archive, ["r1", "r2"])
    for messages, in archive.db.execute("SELECT messages FROM responses"):
        try:
            tuple(json.loads(messages))
        except ValueError:
            continue
        raise AssertionError(f"an older version would read {messages!r} as the conversation")
    archive.close()


def test_a_row_whose_messages_are_missing_or_damaged_is_absent(tmp_path):
    archive = ResponseArchive(tmp_path / "responses.sqlite3", 8)
    _chain(archive, ["r1"])
    _chain(archive, ["r2"])
    archive.db.execute("UPDATE response_messages SET message = '{bad' WHERE message LIKE '%reply r1%'")
    archive.db.execute("DELETE FROM response_messages WHERE message LIKE '%reply r2%'")
    assert archive.get("a", "r1") is None and archive.get("a", "r2") is None
    archive.db.execute("UPDATE responses SET message_ids = '{bad' WHERE id = 'r2'")
    assert archive.get("a", "r2") is None
    assert archive.delete("a", "r2") and archive.delete("a", "r1")   # a damaged list blocks no delete
    archive.close()


def test_two_gateways_sharing_the_file_agree_on_the_messages(tmp_path):
    path = tmp_path / "responses.sqlite3"
    one, other = ResponseArchive(path, 8), ResponseArchive(path, 8)
    turns = _chain(one, ["r1", "r2", "r3"])
    assert other.get("a", "r3") == turns[2]   # read through the other: its messages now held there
    assert other.delete("a", "r3") and one.get("a", "r3") is None
    again = _turn(turns[1].messages, "r3b")
    one.put("a", again)
    assert other.get("a", "r3b") == again and other.get("a", "r2") == turns[1]
    _assert_counts_match_rows(one)
    one.close()
    other.close()


def test_an_older_versions_writes_to_the_shared_file_keep_the_counts(tmp_path):
    """The triggers are part of the file: an older gateway sharing it counts too, its
    `INSERT OR REPLACE` over a row (which fires no delete trigger) included."""
    archive = ResponseArchive(tmp_path / "responses.sqlite3", 8)
    turns = _chain(archive, ["r1", "r2"])
    older = ("INSERT OR REPLACE INTO responses (tenant, id, used_s, response, messages, input_items) "
             "VALUES (?, ?, ?, ?, ?, ?)")
    archive.db.execute(older, ("a", "r2", 9.0, json.dumps(turns[1].response), json.dumps(turns[1].messages), "[]"))
    assert _messages(archive) == {"r1": 1, "reply r1": 1}   # r2's row keeps its own now
    assert archive.get("a", "r2") == StoredResponse(turns[1].response, turns[1].messages)
    archive.db.execute("DELETE FROM responses WHERE id = 'r1'")   # an older version's delete or trim
    assert _messages(archive) == {}
    _assert_counts_match_rows(archive)
    archive.close()
