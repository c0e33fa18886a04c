"""Operating edges (QA50, QA51): a SIGHUP once the stop began, a removed tenant's requests
in the admin metrics, `hash-key`'s input, the `Allow` of a path with two handlers, a
request with two Authorization headers, slash redirects, encoded bodies, and the cut of
a stream whose client stopped reading."""
from __future__ import annotations

import asyncio
import io
import logging
import os
import signal
import socket
import sys
import time

import pytest
from starlette.applications import Starlette
from starlette.routing import Route
from starlette.testclient import TestClient

from gateway.app import build_app
from gateway.cli import main
from gateway.config import load_config
from gateway.http_io import EventStreamResponse
from gateway.reload import apply_tenants
from tests.gateway.serving import start_server
from tests.gateway.test_reload import MODEL, _tenant

CONFIG = MODEL + _tenant("ops", "sk-ops", "admin = true") + _tenant("gamma", "sk-gamma")
IGNORED = "stepahead: SIGHUP ignored: the gateway is stopping"


def _served(directory):
    path = directory / "gw.toml"
    path.write_text(CONFIG)
    with TestClient(build_app(load_config(path))) as test_client:
        yield test_client


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    """One app for the module's requests (each reads only what it changed itself)."""
    yield from _served(tmp_path_factory.mktemp("ops_edges"))


@pytest.fixture()
def fresh_client(tmp_path):
    """An app of its own, for a test that removes a tenant the others use."""
    yield from _served(tmp_path)


def test_a_sighup_once_the_stop_began_is_ignored_with_one_line(tmp_path, caplog):
    """uvicorn drains the connections (up to shutdown_timeout_s) before the lifespan's end
    removes the reload handler: a SIGHUP then reloaded the file."""
    path = tmp_path / "gw.toml"
    path.write_text(MODEL + _tenant("a", "sk-a"))
    app = build_app(load_config(path), config_path=str(path))
    state = app.state.gateway
    stops: list[int] = []

    def server_stop(signum, frame) -> None:   # uvicorn's handle_exit: the stop begins, the drain follows
        stops.append(signum)

    async def hang_up_while_draining() -> None:
        async with app.router.lifespan_context(app):
            path.write_text(MODEL + _tenant("b", "sk-b"))
            os.kill(os.getpid(), signal.SIGTERM)
            await asyncio.sleep(0.1)
            os.kill(os.getpid(), signal.SIGHUP)
            deadline_s = time.monotonic() + 5.0   # a reload takes a few ms: until it is ignored or done
            while not (IGNORED in caplog.text or state.keys.tenant_for_key("sk-b")) and time.monotonic() < deadline_s:
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.2)   # and a reload the same SIGHUP might also have begun

    before = signal.signal(signal.SIGTERM, server_stop)
    try:
        with caplog.at_level(logging.WARNING):
            asyncio.run(hang_up_while_draining())
        assert signal.getsignal(signal.SIGTERM) is server_stop   # the server's handler is put back
    finally:
        signal.signal(signal.SIGTERM, before)
    assert stops == [signal.SIGTERM]   # the server's handler still ran
    assert state.keys.tenant_for_key("sk-b") is None and state.keys.tenant_for_key("sk-a") == "a"
    assert [r.getMessage() for r in caplog.records].count(IGNORED) == 1
    assert signal.getsignal(signal.SIGHUP) == signal.SIG_DFL


def test_a_removed_tenants_requests_stay_in_the_admin_metrics_until_they_drained(fresh_client):
    client = fresh_client
    state = client.app.state.gateway
    gamma = state.limiters["gamma"]
    gamma.num_active = 2   # two requests running when the reload removes gamma
    apply_tenants(state, load_config_text(MODEL + _tenant("ops", "sk-ops", "admin = true")))

    def gamma_lines() -> list[str]:
        text = client.get("/metrics", headers={"Authorization": "Bearer sk-ops"}).text
        return [line for line in text.splitlines() if 'tenant="gamma"' in line and line.startswith("stepahead_tenant_")]

    assert 'stepahead_tenant_active_requests{tenant="gamma"} 2' in gamma_lines()
    gamma.num_active = 0
    assert gamma_lines() == []   # drained: gone from the page


def load_config_text(text: str):
    import tomllib

    from gateway.config import parse_config
    return parse_config(tomllib.loads(text))


def test_hash_key_refuses_a_key_that_is_not_utf8_and_an_empty_tenant_name_in_one_line(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.StringIO("k\udce9y\n"))   # decoded with surrogateescape
    assert main(["hash-key"]) == 2
    assert len(capsys.readouterr().err.splitlines()) == 1
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"\xff\xfe\n"), encoding="utf-8"))
    assert main(["hash-key"]) == 2
    assert len(capsys.readouterr().err.splitlines()) == 1
    for args in (["--generate", "--tenant", ""], ["--tenant", ""]):
        monkeypatch.setattr(sys, "stdin", io.StringIO("sk-given\n"))
        assert main(["hash-key", *args]) == 2
        out = capsys.readouterr()
        assert out.out == "" and "--tenant" in out.err and len(out.err.splitlines()) == 1


@pytest.mark.parametrize("path", ["/v1/files", "/v1/batches"])
def test_a_wrong_method_on_a_path_with_two_handlers_lists_both_in_allow(client, path):
    reply = client.put(path, headers={"Authorization": "Bearer sk-gamma"})
    assert reply.status_code == 405
    assert {m.strip() for m in reply.headers["allow"].split(",")} >= {"GET", "POST"}
    assert client.get(path, headers={"Authorization": "Bearer sk-gamma"}).status_code == 200


@pytest.mark.parametrize("path", ["/v1/models", "/v1/chat/completions"])
def test_a_request_with_two_authorization_headers_is_refused_whatever_their_order(client, path):
    for keys in (("sk-gamma", "sk-wrong"), ("sk-wrong", "sk-gamma"), ("sk-gamma", "sk-gamma")):
        headers = [("authorization", f"Bearer {key}") for key in keys]
        reply = client.request("POST" if "chat" in path else "GET", path, headers=headers,
                               json={"model": "mock", "messages": [{"role": "user", "content": "hi"}]})
        assert reply.status_code == 401, (keys, reply.text)
        assert "2 Authorization headers" in reply.json()["error"]["message"]


@pytest.mark.parametrize(("path", "endpoint"), [("/v1/chat/completions", "chat"), ("/v1/embeddings", "embeddings"),
                                                ("/v1/responses", "responses")])
def test_a_two_authorization_refusal_is_counted_as_a_wrong_key_is(client, path, endpoint):
    series = f'stepahead_requests_total{{tenant="unauthenticated",model_name="",endpoint="{endpoint}",status="401"}}'

    def counted() -> float:
        text = client.get("/metrics", headers={"Authorization": "Bearer sk-ops"}).text   # the admin's: every tenant
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(series))

    before = counted()
    assert client.post(path, headers={"Authorization": "Bearer sk-wrong"}, json={}).status_code == 401
    assert counted() == before + 1   # a wrong key, counted by the handler
    twice = [("authorization", "Bearer sk-gamma"), ("authorization", "Bearer sk-gamma")]
    assert client.post(path, headers=twice, json={}).status_code == 401
    assert counted() == before + 2


@pytest.mark.parametrize(("path", "location"), [("/ui/", "/ui"), ("/v1/traces/sessions/?limit=2",
                                                                    "/v1/traces/sessions?limit=2")])
def test_a_slash_redirect_is_relative_never_built_from_the_host_header(client, path, location):
    reply = client.get(path, headers={"Host": "evil.example", "Authorization": "Bearer sk-gamma"},
                       follow_redirects=False)
    assert reply.status_code == 307 and reply.headers["location"] == location


def test_an_encoded_body_is_refused_as_such(client):
    import gzip
    reply = client.post("/v1/chat/completions", content=gzip.compress(b'{"model": "mock"}'),
                        headers={"Authorization": "Bearer sk-gamma", "Content-Encoding": "gzip",
                                 "Content-Type": "application/json"})
    assert reply.status_code == 415 and reply.json()["error"]["code"] == "unsupported_content_encoding"


def test_a_stream_whose_client_stopped_reading_is_cut_without_uvicorns_error(caplog):
    closes: list[bool] = []

    async def endless(request):
        async def chunks():
            while True:
                yield b"data: " + b"x" * 65536 + b"\n\n"
        stream = EventStreamResponse(chunks(), headers={}, on_close=closes.append)
        stream.stalled_write_s = 0.5
        return stream

    uvicorn_lines: list[str] = []

    class Seen(logging.Handler):
        def emit(self, record) -> None:
            uvicorn_lines.append(record.getMessage())

    seen = Seen()
    server = start_server(Starlette(routes=[Route("/stream", endless)]))
    logging.getLogger("uvicorn.error").addHandler(seen)
    try:
        with caplog.at_level(logging.WARNING, logger="stepahead.gateway"), socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect(("127.0.0.1", server.port))
            sock.sendall(b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")   # then reads nothing
            deadline_s = time.monotonic() + 20
            while not closes:
                assert time.monotonic() < deadline_s, "the stalled stream was not cut"
                time.sleep(0.05)
            time.sleep(0.3)
            cut_lines = [r.getMessage() for r in caplog.records if "a write to its client waited" in r.getMessage()]
    finally:
        logging.getLogger("uvicorn.error").removeHandler(seen)
        server.stop()
    assert closes == [False]
    assert not [line for line in uvicorn_lines if "without completing response" in line], uvicorn_lines
    assert len(cut_lines) == 1 and "/stream" in cut_lines[0]
