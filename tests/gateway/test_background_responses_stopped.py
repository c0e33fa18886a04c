"""Background responses the gateway could not finish because it stopped (FI85, QA175 #3):
killed (read back after a restart, or by another gateway sharing the file) or stopped
gracefully with them queued or running, they end `failed` with an OpenAI `ResponseError`
(`server_error`, saying the gateway stopped and the request may be retried), keeping what
they had; `cancelled` stays what only a client's cancel makes."""
import asyncio
import json
import time

import httpx
import openai
from openai.types.responses import ResponseError

from gateway.background_runs import BackgroundRun, BackgroundRuns
from gateway.background_stream import run_event_stream
from gateway.response_archive import ResponseArchive
from gateway.response_store import ResponseStore, StoredResponse
from gateway.responses_stream import sse_event
from tests.gateway.conftest import KEYS

MESSAGE = {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
           "content": [{"type": "output_text", "text": "so far", "annotations": []}]}


def _unfinished(response_id: str, status: str, output: list) -> StoredResponse:
    return StoredResponse({"id": response_id, "object": "response", "status": status, "background": True,
                           "output": output, "error": None}, (), ({"type": "message", "id": f"in_{response_id}"},))


def _get(store: ResponseStore, tenant: str, response_id: str):
    return asyncio.run(store.get(tenant, response_id))


def _says_the_gateway_stopped(error: dict) -> None:
    """The error object a stopped gateway's background response ends with, as the SDK reads it."""
    assert ResponseError.model_validate(error).code == "server_error"   # a code the SDK's type accepts
    assert set(error) == {"code", "message"}
    assert "gateway" in error["message"] and ("stopped" in error["message"] or "shut down" in error["message"])
    assert "retried" in error["message"]


def test_a_killed_gateways_unfinished_responses_read_back_failed_with_what_they_had(tmp_path):
    """A store closed without ending its runs (its process gone, as after kill -9): another
    store on the file (a restart, another gateway) reads them `failed` with the error
    saying so, their output and input items kept, and stores them so; a row an earlier
    release stored `cancelled` stays `cancelled`."""
    path = tmp_path / "responses.sqlite3"
    first = ResponseStore(capacity=8, archive=ResponseArchive(path, 8))
    asyncio.run(first.put_and_wait("a", _unfinished("r_queued", "queued", []), durable=True))
    asyncio.run(first.put_and_wait("a", _unfinished("r_running", "in_progress", []), durable=True))
    first.put("a", _unfinished("r_running", "in_progress", [MESSAGE]))
    old_release = _unfinished("r_old", "cancelled", [])
    first.put("a", old_release)
    first.close()   # its owner claim given up: the process that ran them is gone
    second = ResponseStore(capacity=8, archive=ResponseArchive(path, 8))
    try:
        queued, running = _get(second, "a", "r_queued"), _get(second, "a", "r_running")
        for stored, output in ((queued, []), (running, [MESSAGE])):
            assert stored.response["status"] == "failed", stored.response
            _says_the_gateway_stopped(stored.response["error"])
            assert stored.response["output"] == output and stored.response["background"] is True
        assert running.input_items == ({"type": "message", "id": "in_r_running"},)
        assert _get(second, "a", "r_old") == old_release   # no migration: an earlier release's rows stay
    finally:
        second.close()
    archive = ResponseArchive(path, 8)   # stored as read back
    try:
        assert archive.get("a", "r_running").response == running.response
    finally:
        archive.close()


def test_the_stop_leaves_a_run_its_client_is_cancelling_to_end_cancelled():
    """A run whose client's cancel is under way when the stop begins is not marked as
    ended by the stop (it ends `cancelled`, as asked); the others are (they end `failed`)."""
    async def main():
        runs = BackgroundRuns()

        async def until_cancelled(run: BackgroundRun) -> None:
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                await asyncio.sleep(0.05)   # its end being stored
            finally:
                run.finish()

        asked = runs.start(BackgroundRun("t", "resp_asked", lambda status: {}), until_cancelled)
        other = runs.start(BackgroundRun("t", "resp_other", lambda status: {}), until_cancelled)
        await asyncio.sleep(0)
        cancelling = asyncio.create_task(runs.cancel(asked))   # POST .../cancel
        await asyncio.sleep(0)
        await runs.cancel_all()   # the stop
        await cancelling
        return asked, other

    asked, other = asyncio.run(main())
    assert asked.is_done and other.is_done
    assert not asked.stopped_by_shutdown and other.stopped_by_shutdown


def test_a_lagging_reader_cut_at_shutdown_reads_the_runs_end_and_no_error_after_it():
    """A run whose log is whole (it ended `response.failed` at the stop, or ended on its
    own): a reader cut while it lags gets the events it missed, the last one the run's
    end, and no `error` event after it (it used to read "is cancelled with it")."""
    async def cut_after_two() -> bytes:
        run = BackgroundRun("a", "resp_1", lambda status: {"status": status})
        for number in range(4):
            run.append(sse_event("response.output_text.delta", number, delta="x"))
        run.append(sse_event("response.failed", 4, response={"status": "failed"}))
        run.finish()
        stream = run_event_stream(run, -1)
        chunks = stream._chunks
        await chunks.__anext__(), await chunks.__anext__()   # the second handed on, not yet sent whole
        cut = stream._on_cut()
        await chunks.aclose()
        return cut

    cut = asyncio.run(cut_after_two())
    events = [json.loads(line[len(b"data: "):]) for line in cut.splitlines() if line.startswith(b"data: ")]
    assert [event["sequence_number"] for event in events] == [1, 2, 3, 4]
    assert events[-1]["type"] == "response.failed"


def _events(lines) -> list[dict]:
    return [json.loads(line[len("data: "):]) for line in lines if line.startswith("data: ")]


def _until(predicate, timeout_s: float = 20.0):
    deadline_s = time.monotonic() + timeout_s
    while not (found := predicate()):
        assert time.monotonic() < deadline_s
        time.sleep(0.02)
    return found


def test_a_graceful_stop_ends_its_background_responses_failed_and_their_streams_with_response_failed(
        fake_upstream, monkeypatch, tmp_path):
    """At the stop's signal (`begin_stop`), a running streamed background response ends
    `failed` with the error saying the gateway stopped, its output so far kept; the
    stream ends with `response.failed` carrying the stored object, as a stream resumed
    with `starting_after` does; one started after the stop began ends so too; one its
    client cancelled before stays `cancelled`; the official client reads them."""
    from gateway.app import build_app
    from gateway.config import key_digest, parse_config
    from gateway.stopping import begin_stop
    from tests.gateway.serving import start_server

    monkeypatch.setenv("STEPAHEAD_TEST_FAKE_KEY", "sk-upstream-secret")
    database = tmp_path / "responses.sqlite3"
    app = build_app(parse_config({
        "server": {"responses_db": str(database)},
        "models": [{"name": "fake", "kind": "upstream", "litellm_model": "openai/fake-model",
                    "api_base": f"{fake_upstream.base_url}/v1", "api_key_env": "STEPAHEAD_TEST_FAKE_KEY"}],
        "tenants": [{"name": "alpha", "api_key_sha256": [key_digest(KEYS["alpha"])]}]}))
    state = app.state.gateway
    server = start_server(app)
    headers = {"Authorization": f"Bearer {KEYS['alpha']}"}
    url = f"{server.base_url}/v1/responses"
    try:
        cancelled = httpx.post(url, headers=headers, json={"model": "fake", "input": "hang", "background": True})
        assert httpx.post(f"{url}/{cancelled.json()['id']}/cancel", headers=headers).json()["status"] == "cancelled"
        lines = []
        body = {"model": "fake", "input": "slow", "background": True, "stream": True}
        with httpx.stream("POST", url, headers=headers, json=body, timeout=30) as reply:
            for line in reply.iter_lines():
                lines.append(line)
                if line.startswith("data: ") and json.loads(line[6:])["type"] == "response.output_text.delta":
                    run = state.background.get("alpha", _events(lines)[0]["response"]["id"])
                    if not state.background.is_stopping:
                        run.task.get_loop().call_soon_threadsafe(begin_stop, state)   # what the signal does
        events = _events(lines)
        assert [event["sequence_number"] for event in events] == list(range(len(events)))
        last = events[-1]
        assert last["type"] == "response.failed", last
        stopped = last["response"]
        assert stopped["status"] == "failed" and stopped["id"] == run.response_id
        _says_the_gateway_stopped(stopped["error"])
        [message] = stopped["output"]   # what it made before the stop, kept
        assert message["status"] == "incomplete" and message["content"][0]["text"]
        assert httpx.get(f"{url}/{run.response_id}", headers=headers).json() == stopped
        resumed = httpx.get(f"{url}/{run.response_id}", headers=headers,
                            params={"stream": "true", "starting_after": 2})
        assert _events(resumed.text.splitlines()) == events[3:]
        after = httpx.post(url, headers=headers, json={"model": "fake", "input": "hang", "background": True}).json()
        ended = _until(lambda: (found := httpx.get(f"{url}/{after['id']}", headers=headers).json())["status"]
                       not in ("queued", "in_progress") and found)
        assert ended["status"] == "failed" and ended["output"] == []
        _says_the_gateway_stopped(ended["error"])
        client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key=KEYS["alpha"], max_retries=0)
        read = client.responses.retrieve(run.response_id)
        assert read.status == "failed" and read.error.code == "server_error" and read.output_text
        assert client.responses.retrieve(cancelled.json()["id"]).status == "cancelled"   # its client's cancel
        counted = state.metrics.render()   # the stopped runs count as the shutdown's cut, the cancel as a 499
        assert 'endpoint="responses",status="503"} 2' in counted, counted
        assert 'endpoint="responses",status="499"} 1' in counted
    finally:
        server.stop()


def test_a_background_request_the_stop_cuts_while_its_queued_row_is_written_is_stored_failed():
    """The handler cancelled (the shutdown) while the `queued` row is written: what it
    stores after that write says the gateway stopped (`failed`), not `cancelled`."""
    from types import SimpleNamespace

    from gateway.responses_format import ResponsesRequest
    from gateway.responses_routes import _stored_queued
    from gateway.responses_stream import ResponsesStreamWriter

    class Writing:
        def __init__(self) -> None:
            self.kept: list[StoredResponse] = []

        async def put_and_wait(self, tenant, stored, *, durable=False):
            raise asyncio.CancelledError   # the shutdown cut the handler meanwhile

        def put(self, tenant, stored):
            self.kept.append(stored)

    responses = Writing()
    writer = ResponsesStreamWriter("resp_x", ResponsesRequest(model="m", input="hi", background=True), 1)
    try:
        asyncio.run(_stored_queued(SimpleNamespace(responses=responses), "t", writer))
    except asyncio.CancelledError:
        pass
    [stored] = responses.kept
    assert stored.response["status"] == "failed" and stored.response["id"] == "resp_x"
    _says_the_gateway_stopped(stored.response["error"])
