"""What a stop does at the signal (QA125): background responses are cancelled as the stop
begins, not after the connections drained; a request the shutdown timeout cut is logged
with that reason (not "forced") and names itself."""
import asyncio
import json
import logging
import signal
import socket
import threading
import time
from types import SimpleNamespace

import httpx
import uvicorn

from gateway.background_runs import BackgroundRun, BackgroundRuns
from gateway.http_protocol import uvicorn_protocols
from gateway.uvicorn_server import CutRequests, start_aware_server_class
from tests.gateway.conftest import KEYS
from tests.gateway.test_background_responses import archived
from tests.gateway.serving import free_port


def a_run(response_id: str = "resp_1") -> BackgroundRun:
    return BackgroundRun("t", response_id, lambda status: {"id": response_id, "status": status})


async def until_cancelled(run: BackgroundRun, seen: list[str]) -> None:
    try:
        seen.append("began")
        await asyncio.sleep(30)
        seen.append("ran to its end")
    except asyncio.CancelledError:
        seen.append("cancelled")   # where a real run stores itself `cancelled`
    finally:
        run.finish()


async def test_a_run_started_in_the_step_the_stop_begins_or_after_is_cancelled_once_it_began():
    """A task cancelled before its first step never runs its body (its `finally` neither):
    the run would stay unfinished and unstored."""
    runs = BackgroundRuns()
    seen_before: list[str] = []
    before = runs.start(a_run("resp_before"), lambda run: until_cancelled(run, seen_before))
    runs.stop_all()   # the same step of the loop: `before` has not begun yet
    seen_after: list[str] = []
    after = runs.start(a_run("resp_after"), lambda run: until_cancelled(run, seen_after))   # a request in flight
    await asyncio.wait_for(asyncio.gather(before.task, after.task), 5)
    assert seen_before == ["began", "cancelled"] and seen_after == ["began", "cancelled"]
    assert before.is_done and after.is_done and before.stopped_by_shutdown and after.stopped_by_shutdown
    await runs.cancel_all()   # the lifespan's end: nothing left to do


async def test_the_lifespans_cancel_all_does_not_cancel_again_a_run_that_is_storing_its_cancel():
    runs = BackgroundRuns()
    steps: list[str] = []

    async def slow_to_store(run: BackgroundRun) -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            await asyncio.sleep(0.05)   # its cancelled end being stored
            steps.append("stored")
        finally:
            run.finish()

    run = runs.start(a_run(), slow_to_store)
    await asyncio.sleep(0)
    runs.stop_all()   # at the signal
    await asyncio.sleep(0.01)
    await runs.cancel_all()   # the lifespan's end, while it stores
    assert steps == ["stored"] and run.is_done


def cut_report(cut: BaseException) -> logging.LogRecord:
    return logging.LogRecord("uvicorn.error", logging.ERROR, __file__, 1, "Exception in ASGI application\n",
                             (), (type(cut), cut, cut.__traceback__))


def cancelled_in_request(method: str, path: str, message: str | None = None) -> asyncio.CancelledError:
    def handler(scope: dict) -> None:
        raise asyncio.CancelledError(*(() if message is None else (message,)))
    try:
        handler({"type": "http", "method": method, "path": path})
    except asyncio.CancelledError as cut:
        return cut
    raise AssertionError("not raised")


def test_a_cut_without_the_timeouts_message_is_told_by_what_the_server_did_and_names_its_request():
    timed_out = SimpleNamespace(drain_timed_out=True, force_exit=False)
    record = cut_report(cancelled_in_request("POST", "/v1/chat/completions"))   # cut again as the loop ended
    assert CutRequests(timed_out).filter(record) and record.exc_info is None
    assert record.getMessage() == ("stepahead: a request in flight was cut: the shutdown timeout passed "
                                   "(POST /v1/chat/completions)")
    forced = SimpleNamespace(drain_timed_out=False, force_exit=True)   # a second Ctrl+C
    record = cut_report(cancelled_in_request("GET", "/v1/responses/resp_1"))
    assert CutRequests(forced).filter(record)
    assert record.getMessage() == "stepahead: a request in flight was cut: the stop was forced (GET /v1/responses/resp_1)"
    record = cut_report(cancelled_in_request("POST", "/v1/completions", "Task cancelled, timeout graceful shutdown "
                                             "exceeded"))
    assert CutRequests(forced).filter(record)   # cut by the timeout first: that is why
    assert record.getMessage() == "stepahead: a request in flight was cut: the shutdown timeout passed (POST /v1/completions)"


def test_a_stream_that_outlives_the_timeouts_cancel_is_logged_as_cut_by_the_timeout_not_forced():
    """QA125 defect 3: a stream blocked past the timeout's cancel (writing its cut event
    into a full socket) is cancelled again, without a message, as the loop ends; no
    second signal came."""
    async def app(scope, receive, send) -> None:
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"first", "more_body": True})
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:   # the timeout's cancel: it does not end at once
            await asyncio.sleep(30)

    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off",
                            **uvicorn_protocols(), timeout_graceful_shutdown=0.3)
    server = start_aware_server_class(lambda: None)(config)
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger("uvicorn.error").addHandler(handler)
    thread = threading.Thread(target=server.run, daemon=True)
    try:
        thread.start()
        assert wait_for(lambda: server.started, 30)
        with socket.create_connection(("127.0.0.1", port)) as client:
            client.sendall(b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
            assert b"first" in read_until(client, b"first")
            server.handle_exit(signal.SIGTERM, None)   # what the signal does; one signal only
            thread.join(30)
    finally:
        logging.getLogger("uvicorn.error").removeHandler(handler)
    assert not thread.is_alive()
    cuts = [record.getMessage() for record in records if "was cut" in record.getMessage()]
    assert cuts == ["stepahead: a request in flight was cut: the shutdown timeout passed (GET /stream)"], \
        [record.getMessage() for record in records]


def wait_for(predicate, timeout_s: float) -> bool:
    deadline_s = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline_s:
            return False
        time.sleep(0.02)
    return True


def read_until(client: socket.socket, marker: bytes) -> bytes:
    received = b""
    client.settimeout(10)
    while marker not in received:
        chunk = client.recv(4096)
        if not chunk:
            break
        received += chunk
    return received


def test_a_running_background_response_is_cancelled_at_the_signal_while_the_drain_waits_on_another_request(
        tmp_path):
    """QA125 defect 1: a background response (tiny model, up to 2,000 tokens) is running
    when the stop begins; another request is in flight (its body half sent), so the drain
    cannot end before the test lets it. The background response's stream ends with
    `response.failed` (FI85: the gateway stopped it, not its client), and the run is over,
    while that request still holds the drain; stored so with its output so far."""
    from gateway.app import build_app
    from gateway.stopping import begin_stop
    from gateway.config import key_digest, parse_config

    database = tmp_path / "responses.sqlite3"
    app = build_app(parse_config({
        "server": {"responses_db": str(database)},
        "models": [{"name": "tiny", "kind": "local", "path": "tiny", "num_workers": 1}],
        "tenants": [{"name": "alpha", "api_key_sha256": [key_digest(KEYS["alpha"])]}]}))
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on",
                            **uvicorn_protocols(), timeout_graceful_shutdown=None)   # the drain waits as long as it takes
    server = start_aware_server_class(lambda: app.state.gateway.cancel_start(), None,
                                      lambda: begin_stop(app.state.gateway))(config)   # as `stepahead serve` does
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    holding = None
    try:
        assert wait_for(lambda: server.started or not thread.is_alive(), 120) and server.started
        holding = socket.create_connection(("127.0.0.1", port))
        holding.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                        b"Authorization: Bearer " + KEYS["alpha"].encode() + b"\r\nContent-Length: 200\r\n\r\n{")
        assert wait_for(lambda: len(server.server_state.tasks) == 1, 10)   # in the app, reading its body
        events: list[dict] = []
        signalled_s = None
        body = {"model": "tiny", "input": "Go on forever.", "max_output_tokens": 2000, "temperature": 1.0,
                "ignore_eos": True, "background": True, "stream": True}
        with httpx.stream("POST", f"http://127.0.0.1:{port}/v1/responses", json=body, timeout=30,
                          headers={"Authorization": f"Bearer {KEYS['alpha']}"}) as reply:
            assert reply.status_code == 200
            for line in reply.iter_lines():
                if not line.startswith("data: "):
                    continue
                events.append(json.loads(line[len("data: "):]))
                if signalled_s is None and events[-1]["type"] == "response.output_text.delta":
                    signalled_s = time.monotonic()
                    server.handle_exit(signal.SIGTERM, None)   # what the signal does
                elif signalled_s is not None and time.monotonic() - signalled_s > 20:
                    break   # a guard: it streams on
        run = app.state.gateway.background.get("alpha", events[0]["response"]["id"])
        assert run.is_done   # over while the other request still holds the drain:
        assert wait_for(lambda: len(server.server_state.tasks) == 1, 10)   # (the stream's own task ends as it closes)
        assert thread.is_alive()
        assert events[-1]["type"] == "response.failed", events[-1]
        assert events[-1]["response"]["error"]["code"] == "server_error"
        assert [e["sequence_number"] for e in events] == list(range(len(events)))
        deltas = sum(e["type"] == "response.output_text.delta" for e in events)
        assert 1 <= deltas < 2000
    finally:
        if holding is not None:
            holding.close()   # the drain ends
        server.should_exit = True
        thread.join(60)
    assert not thread.is_alive()
    stored = archived(database, "alpha", run.response_id)
    assert stored.response == events[-1]["response"] and stored.response["status"] == "failed"
    [message] = stored.response["output"]
    assert message["status"] == "incomplete" and message["content"][0]["text"]
    assert 1 <= stored.response["usage"]["output_tokens"] < 2000   # what it made before the stop


def test_stepahead_serve_hands_the_server_the_apps_first_steps_of_a_stop(monkeypatch, tmp_path):
    import gateway.app
    import gateway.serve_command
    from gateway.cli import main
    from gateway.config import key_digest

    path = tmp_path / "gw.toml"
    path.write_text('[[models]]\nname = "mock"\nkind = "upstream"\nlitellm_model = "openai/gpt-4o-mini"\n'
                    f'[[tenants]]\nname = "a"\napi_key_sha256 = ["{key_digest("sk-a")}"]\n')
    built, handed = [], []
    real_build_app, real_server_class = gateway.app.build_app, gateway.serve_command.start_aware_server_class

    def spy_build_app(*args, **kwargs):
        built.append(real_build_app(*args, **kwargs))
        return built[-1]

    def spy_server_class(*args):
        handed.append(args)
        return real_server_class(*args)

    monkeypatch.setattr(gateway.app, "build_app", spy_build_app)
    monkeypatch.setattr(gateway.serve_command, "start_aware_server_class", spy_server_class)
    monkeypatch.setattr(uvicorn.Server, "run", lambda server, sockets=None: setattr(server, "started", True))
    assert main(["serve", "--config", str(path), "--port", str(free_port())]) == 0
    [(_cancel_start, _announce, begin_stop)] = handed
    assert not built[0].state.gateway.background.is_stopping
    begin_stop()
    assert built[0].state.gateway.background.is_stopping
