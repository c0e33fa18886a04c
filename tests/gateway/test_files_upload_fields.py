"""POST /v1/files's required and repeated form fields (QA212 F2, F3): a missing `file` or
`purpose` is a 400 `missing_required_parameter` naming it, as a missing field of POST
/v1/batches is; a field given twice is a 400 naming it, never the last one taken."""
from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from gateway.app import build_app
from gateway.config import key_digest, parse_config

KEY = "k-upload-fields"
AUTH = {"Authorization": f"Bearer {KEY}"}
BOUNDARY = "fields"


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("upload_fields")
    config = parse_config({"models": [{"name": "mock", "kind": "upstream", "litellm_model": "openai/gpt-4o-mini",
                                       "litellm_params": {"mock_response": "hi"}}],
                           "tenants": [{"name": "a", "api_key_sha256": [key_digest(KEY)]}],
                           "tracing": {"enabled": False},
                           "server": {"responses_db": str(tmp_path / "responses.sqlite3")}})
    with TestClient(build_app(config)) as client:
        yield client


def _error(reply) -> tuple[str, str]:
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["type"] == "invalid_request_error" and error["message"]
    return error["code"], error["param"]


def _form(*parts: tuple[str, str, bytes]) -> bytes:
    """A multipart body of (name, filename or "", content) parts."""
    body = b""
    for name, filename, content in parts:
        disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
        body += f"--{BOUNDARY}\r\nContent-Disposition: {disposition}\r\n\r\n".encode() + content + b"\r\n"
    return body + f"--{BOUNDARY}--\r\n".encode()


def _post_form(client, *parts):
    return client.post("/v1/files", content=_form(*parts),
                       headers={**AUTH, "Content-Type": f"multipart/form-data; boundary={BOUNDARY}"})


def test_a_missing_purpose_or_file_is_missing_required_parameter_naming_it(client):
    no_purpose = client.post("/v1/files", headers=AUTH, files={"file": ("a.txt", b"x")})
    assert _error(no_purpose) == ("missing_required_parameter", "purpose")
    assert "'purpose'" in no_purpose.json()["error"]["message"]
    no_file = _post_form(client, ("purpose", "", b"batch"))
    assert _error(no_file) == ("missing_required_parameter", "file")
    # a body that is no multipart form cannot hold the file part: the same code (it was `invalid_request`)
    for body in (dict(data={"purpose": "batch"}), dict(json={"purpose": "batch"}), {}):
        assert _error(client.post("/v1/files", headers=AUTH, **body)) == ("missing_required_parameter", "file")
    # a batch's missing field answers alike
    no_input = client.post("/v1/batches", headers=AUTH, json={"endpoint": "/v1/embeddings", "completion_window": "24h"})
    assert _error(no_input) == ("missing_required_parameter", "input_file_id")
    # a purpose given but not one of the list is still `invalid_value`
    for purpose in (b"", b"batch_output"):
        assert _error(_post_form(client, ("purpose", "", purpose), ("file", "a.txt", b"x"))) == ("invalid_value",
                                                                                                 "purpose")


def test_a_field_given_twice_is_a_400_naming_it_and_nothing_is_kept(client):
    twice = client.post("/v1/files", headers=AUTH, files={"file": ("a.txt", b"one")},
                        data={"purpose": ["user_data", "batch"]})
    assert _error(twice) == ("invalid_value", "purpose")
    assert "2 'purpose' fields" in twice.json()["error"]["message"]
    same = _post_form(client, ("purpose", "", b"batch"), ("file", "a.txt", b"x"), ("purpose", "", b"batch"))
    assert _error(same) == ("invalid_value", "purpose")
    seconds = _post_form(client, ("purpose", "", b"user_data"), ("expires_after[anchor]", "", b"created_at"),
                         ("expires_after[seconds]", "", b"3600"), ("expires_after[seconds]", "", b"7200"),
                         ("file", "a.txt", b"x"))
    assert _error(seconds) == ("invalid_value", "expires_after[seconds]")
    plain_and_part = _post_form(client, ("purpose", "", b"batch"), ("file", "", b"text"), ("file", "a.txt", b"x"))
    assert _error(plain_and_part) == ("invalid_value", "file")
    assert client.get("/v1/files", headers=AUTH).json()["data"] == []
    kept = _post_form(client, ("purpose", "", b"user_data"), ("file", "a.txt", b"x"))   # once each: kept
    assert kept.status_code == 200 and kept.json()["purpose"] == "user_data"


@pytest.mark.parametrize("parts", [
    (("file", "a.jsonl", b"{}\n"), ("file", "b.jsonl", b"{}\n"), ("purpose", "", b"batch")),
    (("file", "a.jsonl", b"{}\n"), ("purpose", "p.txt", b"batch")),   # purpose sent as a file part
])
def test_a_second_file_part_is_said_in_our_words(client, parts):
    """QA217 F5: starlette's "Too many files. Maximum number of files is 1." came through."""
    reply = _post_form(client, *parts)
    assert _error(reply) == ("invalid_value", "file")
    assert reply.json()["error"]["message"].startswith("Give one file part, named 'file'")
