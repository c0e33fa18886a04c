"""The places the stores write are tried at the start, before the models load: one that
cannot be used fails the start in one line naming it."""
from __future__ import annotations

import asyncio
import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.config import key_digest, parse_config
from gateway.start_failure import StartFailed
from gateway.store_places import check_store_places

REPO = Path(__file__).resolve().parents[2]
UPSTREAM = {"name": "mock", "kind": "upstream", "litellm_model": "openai/gpt-4o-mini",
            "litellm_params": {"mock_response": "hi"}}


def _config(budget: int | None = None):
    limits = {} if budget is None else {"token_budget": budget}
    return parse_config({"models": [UPSTREAM],
                         "tenants": [{"name": "a", "api_key_sha256": [key_digest("sk-a")], "limits": limits},
                                     {"name": "b", "api_key_sha256": [key_digest("sk-b")]}]})


def _environ(tmp_path: Path, **places: Path) -> dict[str, str]:
    return {"STEPAHEAD_RESPONSES_DB": str(places.get("responses", tmp_path / "data" / "responses.sqlite3")),
            "STEPAHEAD_SPENT_TOKENS": str(places.get("spent", tmp_path / "data" / "spent.json")),
            "STEPAHEAD_TRACE_DB": str(places.get("traces", tmp_path / "data" / "traces.sqlite3"))}


def test_usable_places_are_made_as_the_stores_make_them_and_nothing_else_is_left(tmp_path):
    check_store_places(_config(budget=100), _environ(tmp_path))
    data = tmp_path / "data"
    assert sorted(p.name for p in data.iterdir()) == ["conversations.sqlite3", "files", "responses.sqlite3"]
    assert list((data / "files").iterdir()) == []   # the probe written there is gone
    check_store_places(_config(budget=100), _environ(tmp_path))   # again: the files made are used as they are


def test_a_responses_file_that_cannot_be_made_fails_naming_it(tmp_path):
    (tmp_path / "a-file").write_text("")
    responses = tmp_path / "a-file" / "responses.sqlite3"   # under a file: no directory can be made there
    with pytest.raises(StartFailed) as failed:
        check_store_places(_config(), _environ(tmp_path, responses=responses))
    message = str(failed.value)
    assert message.startswith(f"the stored responses' file {responses}: ")
    assert "set [server] responses_db or $STEPAHEAD_RESPONSES_DB to a place it can write" in message
    assert "\n" not in message


def test_a_files_directory_that_cannot_be_written_fails_naming_it(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "files").write_text("")   # a file where the Files API's directory goes
    with pytest.raises(StartFailed, match=f"^the Files and Batch APIs' directory {tmp_path / 'data' / 'files'}: "):
        check_store_places(_config(), _environ(tmp_path))


def test_an_unwritable_spent_tokens_file_fails_only_when_a_tenant_has_a_budget(tmp_path):
    (tmp_path / "a-file").write_text("")
    spent = tmp_path / "a-file" / "spent.json"
    check_store_places(_config(), _environ(tmp_path, spent=spent))   # no budget: nothing to keep
    with pytest.raises(StartFailed) as failed:
        check_store_places(_config(budget=100), _environ(tmp_path, spent=spent))
    message = str(failed.value)
    assert message.startswith(f"the tenants' spent tokens file {spent}: ")
    assert "the token budgets of 'a' would not hold across a restart (set $STEPAHEAD_SPENT_TOKENS" in message


def test_a_spent_tokens_path_that_is_a_directory_fails_the_start_and_moves_nothing(tmp_path):
    """It used to be read as a damaged file and renamed aside with everything in it (the
    responses, conversations and files kept there), the budgets starting again from 0."""
    data = tmp_path / "data"
    (data / "files").mkdir(parents=True)
    (data / "notes.txt").write_text("mine")
    for config in (_config(), _config(budget=100)):   # read at every start, budgets or not
        with pytest.raises(StartFailed) as failed:
            check_store_places(config, _environ(tmp_path, spent=data))
        assert str(failed.value) == (f"the tenants' spent tokens file {data} is a directory (set "
                                     "$STEPAHEAD_SPENT_TOKENS to a file path)")
    assert (data / "notes.txt").read_text() == "mine" and sorted(p.name for p in tmp_path.iterdir()) == ["data"]


def test_every_setting_whose_place_cannot_be_used_is_named_in_the_one_failure(tmp_path):
    """A user with an unwritable home had to start once per store to learn each setting to
    change (the trace store's, then the responses'); now one start names them all, in one
    line, the first unusable place of each setting."""
    (tmp_path / "a-file").write_text("")
    under_a_file = tmp_path / "a-file"
    places = {"traces": under_a_file / "traces.sqlite3", "responses": under_a_file / "responses.sqlite3",
              "spent": under_a_file / "spent.json"}
    with pytest.raises(StartFailed) as failed:
        check_store_places(_config(budget=100), _environ(tmp_path, **places))
    message = str(failed.value)
    assert "\n" not in message
    traces, responses, spent = message.split("; ")
    assert traces.startswith(f"the trace store {places['traces']}: ")
    assert traces.endswith("(set [tracing] store_path or $STEPAHEAD_TRACE_DB to a place it can write)")
    assert responses.startswith(f"the stored responses' file {places['responses']}: ")   # not the conversations' too
    assert responses.endswith("(set [server] responses_db or $STEPAHEAD_RESPONSES_DB to a place it can write)")
    assert spent.startswith(f"the tenants' spent tokens file {places['spent']}: ")
    assert isinstance(failed.value.__cause__, OSError)
    with pytest.raises(StartFailed, match=f"^the trace store {places['traces']}: [^;]*$"):   # only it
        check_store_places(_config(budget=100), _environ(tmp_path, traces=places["traces"]))


def test_no_trace_store_place_is_checked_when_traces_are_not_stored(tmp_path):
    from dataclasses import replace

    (tmp_path / "a-file").write_text("")
    environ = _environ(tmp_path, traces=tmp_path / "a-file" / "traces.sqlite3")
    config = _config()
    for tracing in (replace(config.tracing, enabled=False), replace(config.tracing, store_enabled=False)):
        check_store_places(replace(config, tracing=tracing), environ)


def test_responses_in_memory_check_no_place(tmp_path):
    (tmp_path / "a-file").write_text("")
    check_store_places(_config(), {"STEPAHEAD_RESPONSES_DB": ":memory:",
                                   "STEPAHEAD_SPENT_TOKENS": str(tmp_path / "a-file" / "spent.json"),
                                   "STEPAHEAD_TRACE_DB": str(tmp_path / "traces.sqlite3")})


def test_the_app_checks_the_places_before_any_model_starts(tmp_path, monkeypatch):
    from gateway.app import build_app

    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("STEPAHEAD_RESPONSES_DB", str(tmp_path / "a-file" / "responses.sqlite3"))
    monkeypatch.setenv("STEPAHEAD_TRACE_DB", str(tmp_path / "traces.sqlite3"))
    app = build_app(_config())
    started = []

    async def start(backend) -> None:
        started.append(backend.model_id)

    monkeypatch.setattr(type(app.state.gateway.backends["mock"]), "start", start)

    async def serve() -> None:
        async with app.router.lifespan_context(app):
            pass

    with pytest.raises(StartFailed, match="^the stored responses' file "):
        asyncio.run(serve())
    assert started == []


def test_a_trace_store_the_app_cannot_open_fails_the_start_naming_it_and_the_setting(tmp_path, monkeypatch):
    from gateway.app import build_app

    (tmp_path / "a-file").write_text("")
    place = tmp_path / "a-file" / "traces.sqlite3"
    monkeypatch.setenv("STEPAHEAD_TRACE_DB", str(place))
    app = build_app(_config())

    async def serve() -> None:
        async with app.router.lifespan_context(app):
            pass

    with pytest.raises(StartFailed) as failed:
        asyncio.run(serve())
    assert str(failed.value) == (
        f"the trace store {place}: FileExistsError: [Errno 17] File exists: '{tmp_path / 'a-file'}' "
        "(set [tracing] store_path or $STEPAHEAD_TRACE_DB to a place it can write)")


def test_serve_with_a_responses_file_it_cannot_write_fails_its_start_in_one_line(tmp_path):
    (tmp_path / "a-file").write_text("")
    config = tmp_path / "gw.toml"
    config.write_text("[[models]]\nname = 'mock'\nkind = 'upstream'\nlitellm_model = 'openai/gpt-4o-mini'\n"
                      f"[[tenants]]\nname = 't'\napi_key_sha256 = ['{key_digest('sk-t')}']\n")
    from tests.gateway.serving import free_port

    done = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "serve", "--config", str(config), "--port", str(free_port())],
        capture_output=True, text=True, timeout=120, cwd=REPO,
        env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True",
             "STEPAHEAD_TRACE_DB": str(tmp_path / "traces.sqlite3"),
             "STEPAHEAD_PREDICTOR_DIR": str(tmp_path / "predictor"),
             "STEPAHEAD_SPENT_TOKENS": str(tmp_path / "spent.json"),
             "STEPAHEAD_RESPONSES_DB": str(tmp_path / "a-file" / "r.sqlite3")})
    assert done.returncode == 3, done.stderr[-3000:]
    [line] = [line for line in done.stderr.splitlines() if "the start failed" in line]
    assert f"stepahead: the start failed: the stored responses' file {tmp_path / 'a-file' / 'r.sqlite3'}: " in line
    assert "Traceback" not in done.stderr and "could not" not in done.stderr


def _modes(directory: Path) -> dict[str, int]:
    """The mode of each thing in `directory`, by name, and of the directory itself ('.')."""
    return {".": stat.S_IMODE(directory.stat().st_mode),
            **{p.name: stat.S_IMODE(p.stat().st_mode) for p in directory.iterdir()}}


def test_what_the_stores_make_is_private_to_the_gateways_user(tmp_path, umask_022):
    """Under umask 022 the responses, conversations, files, spent tokens and forecasts
    (prompts and replies among them) were readable by any local user (0644 files,
    0755 directories)."""
    from agents_trace.predict.config import PredictorConfig
    from agents_trace.predict.predictor import Predictor
    from gateway.conversation_archive import Conversation, ConversationArchive
    from gateway.file_store import FileStore
    from gateway.forecasting import GAPS_DIR, ForecastRelay
    from gateway.response_archive import ResponseArchive
    from gateway.response_store import StoredResponse
    from gateway.spent_tokens import SpentTokens
    from tests.gateway.test_forecasting import feed_two_answer_sessions

    data = tmp_path / "home" / "data"
    environ = _environ(tmp_path, responses=data / "responses.sqlite3", spent=data / "budgets" / "spent.json")
    check_store_places(_config(budget=100), environ)
    assert (tmp_path / "home").stat().st_mode & 0o777 == 0o700   # a parent made for them too
    responses = ResponseArchive(data / "responses.sqlite3", 8)
    conversations = ConversationArchive(data / "conversations.sqlite3", 8)
    files = FileStore(data / "files")
    try:
        responses.put("a", StoredResponse({"id": "resp_1"}, ({"role": "user", "content": "a secret prompt"},)))
        conversations.create("a", Conversation("conv_1", 100, {}), [
            {"type": "message", "id": "msg_1", "status": "completed", "role": "user",
             "content": [{"type": "input_text", "text": "a secret"}]}])
        asyncio.run(files.add_bytes("a", "input.jsonl", "batch", b'{"secret": 1}\n'))
        SpentTokens(data / "budgets" / "spent.json").sync({"a": 5}, {"a"})
        private = {name: 0o600 for name in ("responses.sqlite3", "responses.sqlite3-wal", "responses.sqlite3-shm",
                                            "conversations.sqlite3", "conversations.sqlite3-wal",
                                            "conversations.sqlite3-shm")}
        assert _modes(data) == {".": 0o700, **private, "files": 0o700, "budgets": 0o700}
        assert set(_modes(data / "files").values()) == {0o700, 0o600}   # its index (and -wal, -shm), the upload
        assert _modes(data / "budgets") == {".": 0o700, "spent.json": 0o600, "spent.json.lock": 0o600}
    finally:
        responses.close()
        conversations.close()
        files.close()

    forecasts = tmp_path / "predictor"   # the gateway's claim on it makes it (gateway/directory_claim.py)
    forecasts.mkdir(mode=0o750)
    with Predictor(PredictorConfig(background_refits=False)) as predictor:
        relay = ForecastRelay(predictor, {})
        feed_two_answer_sessions(relay, range(12), tenant="a")
        relay.save(forecasts)
    assert _modes(forecasts)["."] == 0o750   # the operator's: left as it was
    assert {mode for name, mode in _modes(forecasts).items() if name not in (".", GAPS_DIR)} == {0o600}
    assert set(_modes(forecasts / GAPS_DIR).values()) == {0o700, 0o600}


def test_directories_already_there_keep_their_mode(tmp_path, umask_022):
    data = tmp_path / "data"
    data.mkdir(mode=0o750)
    check_store_places(_config(budget=100), _environ(tmp_path))
    assert _modes(data) == {".": 0o750, "responses.sqlite3": 0o600, "conversations.sqlite3": 0o600, "files": 0o700}


def _sqlite_error(tmp_path: Path, kind: str) -> sqlite3.Error:
    """A real error SQLite raises: "damaged" (a page it cannot read) or "locked" (another
    connection holds the file's write lock)."""
    path = tmp_path / f"{kind}.sqlite3"
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("CREATE TABLE t (x)")
    if kind == "locked":
        db.execute("BEGIN EXCLUSIVE")
        query = lambda: sqlite3.connect(path, timeout=0).execute("INSERT INTO t VALUES (1)")   # noqa: E731
    else:
        db.execute("INSERT INTO t VALUES (zeroblob(20000))")
        db.close()
        with open(path, "r+b") as file:
            file.seek(4096)
            file.write(b"\xff" * 8192)
        query = lambda: sqlite3.connect(path).execute("SELECT * FROM t").fetchall()   # noqa: E731
    with pytest.raises(sqlite3.Error) as raised:
        query()
    return raised.value


@pytest.mark.parametrize("kind, hint", [
    ("damaged", "(the file is damaged and was not set aside: move it away, or restore it from a backup; "
                "the next start then begins a new one)"),
    ("locked", "(another process holds the file locked: stop it, or set [server] responses_db or "
               "$STEPAHEAD_RESPONSES_DB to a place of its own)")])
def test_an_archive_that_fails_to_open_for_damage_or_a_lock_is_not_told_to_find_a_writable_place(
        tmp_path, monkeypatch, kind, hint):
    """QA181 F3: the start sets a damaged archive aside; one whose opening still fails for
    damage (it could not) or a lock gets the hint that fits, not "a place it can write"."""
    from gateway.conversation_archive import ConversationArchive

    error = _sqlite_error(tmp_path, kind)

    def failing(self):
        raise error

    monkeypatch.setattr(ConversationArchive, "db", property(failing))
    with pytest.raises(StartFailed) as failed:
        check_store_places(_config(), _environ(tmp_path))
    conversations = tmp_path / "data" / "conversations.sqlite3"
    assert str(failed.value) == f"the conversations' file {conversations}: {type(error).__name__}: {error} {hint}"
