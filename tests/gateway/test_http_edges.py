"""HTTP edges (QA108): a WebSocket upgrade is served as the plain HTTP request it also is
(an OpenAI-shaped 404 with `x-request-id`, not uvicorn's bare 403); an upload sent with a
`Content-Encoding` is the 415 a JSON body gets, and its media type matches in any case;
the HTTP guard's 400/408/431 carry an `x-request-id`; GET and DELETE on
/v1/responses/input_tokens are its 405; a body that is not a JSON object has one code on
every route."""
from __future__ import annotations

import gzip
import json
import re
import socket
import threading
import time

import pytest
import uvicorn
from starlette.testclient import TestClient

from gateway.app import build_app
from gateway.cli import main
from gateway.config import key_digest, parse_config
from gateway.http_protocol import refusal_bytes
from tests.gateway.serving import free_port

KEY = "sk-http-edges"
AUTH = {"Authorization": f"Bearer {KEY}"}
REQUEST_ID = re.compile(r"req-[0-9a-f]{24}")


def _config(tmp_path):
    return parse_config({"models": [{"name": "mock", "kind": "upstream", "litellm_model": "openai/gpt-4o-mini",
                                     "litellm_params": {"mock_response": "hi"}}],
                         "tenants": [{"name": "t", "api_key_sha256": [key_digest(KEY)]}],
                         "tracing": {"enabled": False},
                         "server": {"responses_db": str(tmp_path / "responses.sqlite3")}})


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    with TestClient(build_app(_config(tmp_path_factory.mktemp("app")))) as test_client:
        yield test_client


@pytest.fixture(scope="module")
def serve_options():
    """The protocol options `stepahead serve` hands uvicorn (its run left out)."""
    seen = {}

    def run(server, sockets=None) -> None:
        seen.update(http=server.config.http, ws=server.config.ws)
        server.started = True

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(uvicorn.Server, "run", run)
        assert main(["serve", "--model", "tiny", "--port", str(free_port()), "--workers", "1"]) == 0
    return seen


@pytest.fixture(scope="module")
def served(tmp_path_factory, serve_options):
    """The gateway under uvicorn with `stepahead serve`'s protocol options; its port."""
    app = build_app(_config(tmp_path_factory.mktemp("served")))
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on",
                                           **serve_options))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline_s = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline_s, "the test server did not start"
        time.sleep(0.02)
    yield port
    server.should_exit = True
    thread.join(timeout=30)


def _exchange(port: int, data: bytes) -> tuple[int, dict[str, str], bytes]:
    """Status, headers (lower-case names) and body of the one answer to `data`."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        answer = b""
        while b"\r\n\r\n" not in answer and (chunk := sock.recv(65536)):
            answer += chunk
        head, _, body = answer.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        fields = (line.partition(":") for line in lines[1:])
        headers = {name.strip().lower(): value.strip() for name, _, value in fields}
        while len(body) < int(headers.get("content-length", 0)) and (chunk := sock.recv(65536)):
            body += chunk
        return int(lines[0].split()[1]), headers, body


# --- WebSocket upgrades -------------------------------------------------------------------

def test_serve_hands_uvicorn_no_websocket_protocol(serve_options):
    from gateway.http_protocol import GuardedHttpToolsProtocol
    assert serve_options == {"http": GuardedHttpToolsProtocol, "ws": "none"}


@pytest.mark.parametrize("path", ["/v1/realtime?model=mock", "/v1/nope"])
def test_a_websocket_upgrade_is_answered_as_plain_http_openai_shaped(served, path):
    upgrade = (f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
               "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
               f"Authorization: Bearer {KEY}\r\n\r\n").encode()
    status, headers, body = _exchange(served, upgrade)
    assert status == 404, (status, body)
    assert json.loads(body)["error"]["code"] == "not_found" and "Invalid URL (GET /v1/" in body.decode()
    assert REQUEST_ID.fullmatch(headers.get("x-request-id", ""))


def _all_answers(port: int, first: bytes, then: bytes) -> bytes:
    """Everything the server sends on one connection to `first`, then (a moment later, a
    read of its own) `then`, until it closes the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(first)
        time.sleep(0.3)
        try:
            sock.sendall(then)
        except OSError:   # closed already
            pass
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
        return answer


STATUS_LINE = re.compile(rb"HTTP/1\.1 \d{3} ")
MODELS_REQUEST = f"GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n\r\n".encode()


@pytest.mark.parametrize("upgrade", ["websocket", "h2c"])
def test_a_body_sent_with_an_upgrade_is_refused_and_nothing_after_it_is_read(served, upgrade):
    """QA113: the parser reads nothing after a head that asks to switch protocols: the body
    was lost ("The request body is empty") and the bytes after it were answered as the next
    request (a smuggled GET /v1/models answered 200)."""
    body = json.dumps({"model": "mock", "messages": [{"role": "user", "content": "hi"}]}).encode()
    post = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\n"
            f"Upgrade: {upgrade}\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n"
            f"Authorization: Bearer {KEY}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    answer = _all_answers(served, post, body + MODELS_REQUEST)
    assert len(STATUS_LINE.findall(answer)) == 1, answer
    assert answer.startswith(b"HTTP/1.1 400 ") and b'"upgrade_not_supported"' in answer


@pytest.mark.parametrize("coding", ["gzip, chunked", "deflate,chunked", "x-custom"])   # ("chunked, gzip": the parser's 400)
def test_a_body_with_a_transfer_coding_other_than_chunked_is_the_501(served, coding):
    """QA163: `Transfer-Encoding: gzip, chunked` was served as if unencoded (the parser undoes
    only the chunks): a plain body answered 200, a gzipped one a 400 calling it broken JSON."""
    body = json.dumps({"model": "mock", "messages": [{"role": "user", "content": "hi"}]}).encode()
    post = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
            f"Content-Type: application/json\r\nTransfer-Encoding: {coding}\r\n\r\n").encode()
    answer = _all_answers(served, post, f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n" + MODELS_REQUEST)
    assert len(STATUS_LINE.findall(answer)) == 1, answer
    assert answer.startswith(b"HTTP/1.1 501 ") and b'"unsupported_transfer_encoding"' in answer, answer
    plain = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
             f"Content-Type: application/json\r\nTransfer-Encoding: Chunked\r\nConnection: close\r\n\r\n").encode()
    assert _all_answers(served, plain, f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n").startswith(b"HTTP/1.1 200 ")


def test_a_refusal_pipelined_behind_a_request_waits_for_its_answer(served):
    """QA115: the refusal was written at once, so a pipelining client took it for the
    earlier request's answer, and that request was cut (499)."""
    body = b'{"model": "mock"}'
    refused = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n"
               f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    answer = _all_answers(served, MODELS_REQUEST + refused, b"")
    statuses = [line.split()[1] for line in STATUS_LINE.findall(answer)]
    assert statuses == [b"200", b"400"], answer
    assert b'"upgrade_not_supported"' in answer.split(b"HTTP/1.1 400 ")[1]


def test_a_malformed_chunk_is_its_requests_one_answer_and_the_connection_closes(served):
    """QA118: the refusal waited for the answer of the very request whose body failed,
    which waited for the rest of its body: no answer, the connection held open."""
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
            "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n").encode()
    answer = _all_answers(served, head + b"zz\r\n{}\r\n0\r\n\r\n", b"")
    assert len(STATUS_LINE.findall(answer)) == 1 and answer.startswith(b"HTTP/1.1 400 "), answer
    assert b'"invalid_http_request"' in answer


def test_a_request_answered_before_its_body_failed_gets_no_second_answer(served):
    head = (f"POST /v1/nope HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
            "Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n").encode()
    answer = _all_answers(served, head, b"zz\r\n")   # the app answers 404 before the bad chunk comes
    assert len(STATUS_LINE.findall(answer)) == 1 and answer.startswith(b"HTTP/1.1 404 "), answer


def test_a_long_head_after_another_request_in_one_read_is_the_431(served):
    """QA118: only a read's first head was measured, so a 70 kB head sent after a request
    in the same read was served."""
    long_head = (f"GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
                 f"X-Filler: {'a' * 70_000}\r\n\r\n").encode()
    answer = _all_answers(served, MODELS_REQUEST + long_head + MODELS_REQUEST, b"")
    statuses = [line.split()[1] for line in STATUS_LINE.findall(answer)]
    assert statuses == [b"200", b"431"], answer[:300]


@pytest.mark.parametrize("length", ["0", "00"])
def test_an_upgrade_with_an_empty_body_is_answered(served, length):
    upgrade = (f"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n"
               f"Content-Length: {length}\r\nAuthorization: Bearer {KEY}\r\n\r\n").encode()
    assert _all_answers(served, upgrade, b"").startswith(b"HTTP/1.1 200 ")


def test_a_request_asking_to_upgrade_is_answered_and_its_connection_closed(served):
    upgrade = (f"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
               f"Authorization: Bearer {KEY}\r\n\r\n").encode()
    answer = _all_answers(served, upgrade, MODELS_REQUEST)
    assert len(STATUS_LINE.findall(answer)) == 1 and answer.startswith(b"HTTP/1.1 200 "), answer
    assert b"connection: close" in answer.lower()


# --- the HTTP guard's refusals ------------------------------------------------------------

def test_each_refusal_of_the_http_guard_has_its_own_request_id():
    ids = []
    for status in (400, 408, 431):
        head, _, body = refusal_bytes(status, "m", "c").partition(b"\r\n\r\n")
        headers = dict(line.split(": ", 1) for line in head.decode().split("\r\n")[1:])
        assert REQUEST_ID.fullmatch(headers.get("x-request-id", "")), head
        assert int(headers["content-length"]) == len(body) and body.startswith(b'{"error":{"message":"m"')
        ids.append(headers["x-request-id"])
    assert len(set(ids)) == 3


@pytest.mark.parametrize(("data", "status"), [
    (b"GET /v1/models HTTP/1.1\r\nHost: x\r\nNo colon here\r\n\r\n", 400),
    (b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 70_000 + b"\r\n\r\n", 431)],
    ids=["a-header-line-without-colon", "a-head-past-64KiB"])
def test_a_request_the_http_guard_refuses_carries_a_request_id(served, data, status):
    answered, headers, body = _exchange(served, data)
    assert answered == status and json.loads(body)["error"]["type"] == "invalid_request_error"
    assert REQUEST_ID.fullmatch(headers.get("x-request-id", "")), headers


# --- uploads ------------------------------------------------------------------------------

def _form(boundary: str = "edges") -> bytes:
    return (f'--{boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nuser_data\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.txt"\r\n\r\nhello\r\n'
            f"--{boundary}--\r\n").encode()


@pytest.mark.parametrize(("coding", "compress"), [("gzip", True), ("gzip", False), ("br", False)])
def test_an_encoded_upload_is_the_415_of_an_encoded_json_body_and_nothing_is_kept(client, coding, compress):
    body = gzip.compress(_form()) if compress else _form()
    reply = client.post("/v1/files", content=body, headers={**AUTH, "Content-Encoding": coding,
                                                            "Content-Type": "multipart/form-data; boundary=edges"})
    assert reply.status_code == 415, reply.text
    error = reply.json()["error"]
    assert error["code"] == "unsupported_content_encoding" and f"Content-Encoding: {coding}" in error["message"]
    assert client.get("/v1/files", headers=AUTH).json()["data"] == []


@pytest.mark.parametrize("codings", [[("content-encoding", "identity"), ("content-encoding", "gzip")],
                                     [("content-encoding", "identity, br")]])
def test_a_coding_in_any_content_encoding_field_is_the_415(client, codings):
    """QA113: only the first field was read: `identity` then `gzip` was read as plain JSON."""
    body = gzip.compress(json.dumps({"model": "mock", "messages": [{"role": "user", "content": "hi"}]}).encode())
    reply = client.post("/v1/chat/completions", content=body,
                        headers=[("authorization", f"Bearer {KEY}"), ("content-type", "application/json"), *codings])
    assert reply.status_code == 415 and reply.json()["error"]["code"] == "unsupported_content_encoding", reply.text


def test_an_upload_without_a_boundary_says_so_in_words_of_its_own(client):
    reply = client.post("/v1/files", content=_form(), headers={**AUTH, "Content-Type": "multipart/form-data"})
    assert reply.status_code == 400
    assert reply.json()["error"]["message"] == "The multipart body could not be read: Missing boundary in multipart."


@pytest.mark.parametrize("media_type", ["Multipart/Form-Data", "MULTIPART/FORM-DATA", " multipart/form-data"])
def test_an_uploads_media_type_matches_in_any_case(client, media_type):
    reply = client.post("/v1/files", content=_form(), headers={**AUTH, "Content-Encoding": "identity",
                                                               "Content-Type": f"{media_type}; boundary=edges"})
    assert reply.status_code == 200, reply.text
    assert reply.json()["bytes"] == 5
    assert client.delete(f"/v1/files/{reply.json()['id']}", headers=AUTH).status_code == 200


def test_an_upload_of_another_media_type_is_still_refused(client):
    reply = client.post("/v1/files", content=_form(),
                        headers={**AUTH, "Content-Type": "multipart/form-datax; boundary=edges"})
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "file"


# --- /v1/responses/input_tokens -------------------------------------------------------------

@pytest.mark.parametrize("method", ["GET", "DELETE", "PUT", "HEAD"])
def test_a_method_input_tokens_does_not_take_is_its_405(client, method):
    reply = client.request(method, "/v1/responses/input_tokens", headers=AUTH)
    assert reply.status_code == 405 and reply.headers["allow"] == "POST"
    if method != "HEAD":
        assert reply.json()["error"]["code"] == "method_not_allowed"


def test_stored_responses_and_input_tokens_are_still_served(client):
    counted = client.post("/v1/responses/input_tokens", headers=AUTH, json={"model": "mock", "input": "hi"})
    assert counted.json()["error"]["code"] == "model_not_supported"   # its handler's answer (local models only)
    created = client.post("/v1/responses", headers=AUTH, json={"model": "mock", "input": "hi"}).json()
    assert client.get(f"/v1/responses/{created['id']}", headers=AUTH).json()["id"] == created["id"]
    missing = client.get("/v1/responses/resp_missing", headers=AUTH)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "response_not_found"
    assert client.delete(f"/v1/responses/{created['id']}", headers=AUTH).json()["deleted"] is True
    allow = client.request("PUT", f"/v1/responses/{created['id']}", headers=AUTH).headers["allow"]
    assert {method.strip() for method in allow.split(",")} == {"GET", "HEAD", "DELETE"}


# --- a body that is not a JSON object -------------------------------------------------------

@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions", "/v1/responses",
                                  "/v1/responses/input_tokens", "/v1/embeddings", "/v1/conversations",
                                  "/v1/batches"])
@pytest.mark.parametrize("body", [b"[]", b'"x"', b"null"])
def test_a_body_that_is_not_an_object_has_one_code_on_every_route(client, path, body):
    reply = client.post(path, headers={**AUTH, "Content-Type": "application/json"}, content=body)
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert (error["message"], error["code"]) == ("The request body must be a JSON object.", "invalid_request")


def test_a_body_that_is_not_an_object_has_one_code_on_a_conversation_and_its_items(client):
    conversation = client.post("/v1/conversations", headers=AUTH, json={}).json()["id"]
    for path in (f"/v1/conversations/{conversation}", f"/v1/conversations/{conversation}/items"):
        reply = client.post(path, headers={**AUTH, "Content-Type": "application/json"}, content=b"[1]")
        assert (reply.status_code, reply.json()["error"]["code"]) == (400, "invalid_request"), path
