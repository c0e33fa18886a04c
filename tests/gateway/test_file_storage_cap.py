"""A tenant's cap on stored file bytes (`[server] file_bytes_per_tenant`, QA93), an expired
file's DELETE (QA90 finding 6) and ASCII-only numbers in the upload form (QA90 finding 9)."""
from __future__ import annotations

import asyncio
import io

import pytest
from starlette.testclient import TestClient

from gateway.app import build_app
from gateway.config import ConfigError, key_digest, parse_config
from gateway.errors import ApiError
from gateway.file_store import FileStore
from gateway.reload import reload_tenants
from tests.gateway.test_reload import MODEL, _tenant

KEYS = {"a": "k-cap-a", "b": "k-cap-b"}
STORAGE_FULL_CODE = "file_storage_limit_exceeded"
TEN_GIB = 10 * 1024 ** 3


class Clock:
    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


def _kept(root) -> list[str]:
    return sorted(path.name for path in root.iterdir() if path.name.startswith("file-"))


def _refused_for_room(call) -> ApiError:
    with pytest.raises(ApiError) as refused:
        asyncio.run(call)
    assert (refused.value.status, refused.value.code, refused.value.param) == (400, STORAGE_FULL_CODE, "file")
    return refused.value


def test_an_upload_past_its_tenants_cap_is_refused_and_nothing_of_it_kept_other_tenants_untouched(tmp_path):
    root = tmp_path / "files"
    store = FileStore(root, clock=Clock())
    try:
        first = asyncio.run(store.add("a", "x.txt", "user_data", io.BytesIO(b"x" * 60), max_tenant_bytes=100))
        refused = _refused_for_room(store.add("a", "y.txt", "user_data", io.BytesIO(b"y" * 50), max_tenant_bytes=100))
        assert "100 bytes" in refused.message and "hold 60 bytes" in refused.message and "110" in refused.message
        assert "DELETE /v1/files/{file_id}" in refused.message
        assert _kept(root) == [first.id]   # the refused upload's bytes were never written
        # another tenant has its own room; exactly the cap fits
        asyncio.run(store.add("b", "z.txt", "user_data", io.BytesIO(b"z" * 100), max_tenant_bytes=100))
        # a batch's output is counted but never refused
        output = asyncio.run(store.add_bytes("a", "out.jsonl", "batch_output", b"o" * 500))
        assert asyncio.run(store.stored_bytes("a")) == 560 and asyncio.run(store.stored_bytes("b")) == 100
        _refused_for_room(store.add("a", "w.txt", "user_data", io.BytesIO(b"w"), max_tenant_bytes=100))
        # deleting frees the room
        asyncio.run(store.delete("a", output.id))
        asyncio.run(store.add("a", "w.txt", "user_data", io.BytesIO(b"w" * 40), max_tenant_bytes=100))
        assert asyncio.run(store.stored_bytes("a")) == 100
    finally:
        store.close()


def test_expired_files_free_their_room_and_a_cap_of_0_refuses_every_upload(tmp_path):
    clock = Clock()
    store = FileStore(tmp_path / "files", clock=clock)
    try:
        asyncio.run(store.add("a", "x.txt", "user_data", io.BytesIO(b"x" * 90), max_tenant_bytes=100,
                               expires_after_s=3600))
        _refused_for_room(store.add("a", "y.txt", "user_data", io.BytesIO(b"y" * 20), max_tenant_bytes=100))
        clock.now += 3600
        asyncio.run(store.add("a", "y.txt", "user_data", io.BytesIO(b"y" * 20), max_tenant_bytes=100))
        _refused_for_room(store.add("c", "one.txt", "user_data", io.BytesIO(b"1"), max_tenant_bytes=0))
        _refused_for_room(store.add("c", "empty.txt", "user_data", io.BytesIO(b""), max_tenant_bytes=0))   # QA99
    finally:
        store.close()


def test_concurrent_uploads_of_one_tenant_never_pass_the_cap_together(tmp_path):
    root = tmp_path / "files"
    store = FileStore(root, clock=Clock())

    async def main():
        return await asyncio.gather(*(store.add("a", f"{n}.txt", "user_data", io.BytesIO(b"x" * 40),
                                                max_tenant_bytes=100) for n in range(5)), return_exceptions=True)
    try:
        results = asyncio.run(main())
        assert sum(not isinstance(result, Exception) for result in results) == 2
        assert all(result.code == STORAGE_FULL_CODE for result in results if isinstance(result, ApiError))
        assert asyncio.run(store.stored_bytes("a")) == 80 and len(_kept(root)) == 2
    finally:
        store.close()


def test_the_statement_that_records_a_file_checks_the_cap_so_two_gateways_on_one_directory_cannot_pass_it(
        tmp_path):
    root = tmp_path / "files"
    one, other = FileStore(root, clock=Clock()), FileStore(root, clock=Clock())
    try:
        asyncio.run(one.add("a", "x.txt", "user_data", io.BytesIO(b"x" * 60), max_tenant_bytes=100))
        # `other` checked its room before `one`'s file was recorded (a size that fit then) and wrote its bytes
        late = other._thread.call(other._add, "a", "y.txt", "user_data", lambda out: out.write(b"y" * 50), None,
                                  100, lambda: 0)
        _refused_for_room(late)
        assert len(_kept(root)) == 1 and asyncio.run(other.stored_bytes("a")) == 60
    finally:
        one.close()
        other.close()


def test_deleting_a_file_past_its_expiry_is_the_same_404_as_getting_it(tmp_path):
    clock = Clock()
    store = FileStore(tmp_path / "files", clock=clock)
    try:
        stored = asyncio.run(store.add_bytes("a", "x.txt", "user_data", b"x", expires_after_s=3600))
        clock.now += 3600
        for call in (store.get("a", stored.id), store.delete("a", stored.id)):
            with pytest.raises(ApiError) as missing:
                asyncio.run(call)
            assert (missing.value.status, missing.value.code) == (404, "not_found")
    finally:
        store.close()


# --- the route and the config ------------------------------------------------------------

def _config(tmp_path, **server):
    return parse_config({"models": [{"name": "mock", "kind": "upstream", "litellm_model": "openai/gpt-4o-mini",
                                     "litellm_params": {"mock_response": "hi"}}],
                         "tenants": [{"name": name, "api_key_sha256": [key_digest(key)]} for name, key in KEYS.items()],
                         "tracing": {"enabled": False},
                         "server": {"responses_db": str(tmp_path / "responses.sqlite3"), **server}})


def _headers(tenant: str) -> dict:
    return {"Authorization": f"Bearer {KEYS[tenant]}"}


def _upload(client, tenant: str, data: bytes, **fields):
    return client.post("/v1/files", headers=_headers(tenant), files={"file": ("f.txt", data)},
                       data={"purpose": "user_data", **fields})


def test_the_upload_route_refuses_past_the_cap_in_openais_error_shape_and_keeps_nothing(tmp_path):
    app = build_app(_config(tmp_path, file_bytes_per_tenant=100_000))
    with TestClient(app) as client:
        first = _upload(client, "a", b"x" * 60_000)
        assert first.status_code == 200
        again = _upload(client, "a", b"x" * 60_000)
        assert again.status_code == 400, again.text
        error = again.json()["error"]
        assert (error["type"], error["code"], error["param"]) == ("invalid_request_error", STORAGE_FULL_CODE, "file")
        assert "100000 bytes" in error["message"] and "hold 60000 bytes" in error["message"]
        # a body far past the room is refused from its declared length, or while it streams in chunks
        declared = _upload(client, "a", b"y" * 300_000)
        assert (declared.status_code, declared.json()["error"]["code"]) == (400, STORAGE_FULL_CODE)
        assert "this upload's body (300" in declared.json()["error"]["message"]
        body = (b'--fi16\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nuser_data\r\n'
                b'--fi16\r\nContent-Disposition: form-data; name="file"; filename="big.txt"\r\n\r\n'
                + b"y" * 300_000 + b"\r\n--fi16--\r\n")
        multipart = {"Content-Type": "multipart/form-data; boundary=fi16"}
        chunked = client.post("/v1/files", headers={**_headers("a"), **multipart},
                              content=iter([body[start:start + 50_000] for start in range(0, len(body), 50_000)]))
        assert "content-length" not in chunked.request.headers
        assert (chunked.status_code, chunked.json()["error"]["code"]) == (400, STORAGE_FULL_CODE)
        assert "is larger than the 40000 bytes left" in chunked.json()["error"]["message"]
        listed = client.get("/v1/files", headers=_headers("a")).json()["data"]
        assert [f["id"] for f in listed] == [first.json()["id"]]
        assert len(_kept(tmp_path / "files")) == 1
        assert _upload(client, "b", b"z" * 100_000).status_code == 200   # another tenant's room
        assert client.delete(f"/v1/files/{first.json()['id']}", headers=_headers("a")).status_code == 200
        assert _upload(client, "a", b"x" * 60_000).status_code == 200


def test_an_upload_is_refused_early_for_the_bytes_its_tenants_other_uploads_are_sending(tmp_path):
    app = build_app(_config(tmp_path, file_bytes_per_tenant=1_000_000))
    uploads = app.state.gateway.files.uploads
    with TestClient(app) as client:
        with uploads.reserving("a", 900_000):   # another upload of "a" is sending 900,000 bytes
            refused = _upload(client, "a", b"x" * 200_000)
            assert (refused.status_code, refused.json()["error"]["code"]) == (400, STORAGE_FULL_CODE)
            assert "hold 0 bytes and your other uploads in progress are sending 900000 more" in \
                refused.json()["error"]["message"]
            assert _upload(client, "b", b"x" * 200_000).status_code == 200
        assert uploads.held("a") == 0 and uploads.held("b") == 0   # each request's reservation released
        assert _upload(client, "a", b"x" * 200_000).status_code == 200


@pytest.mark.parametrize("seconds", ["٣٦٠٠", "３６００", "3600²"])
def test_expires_after_seconds_in_other_scripts_digits_is_the_400_of_a_bad_value(tmp_path, seconds):
    with TestClient(build_app(_config(tmp_path))) as client:
        answer = _upload(client, "a", b"x", **{"expires_after[anchor]": "created_at",
                                               "expires_after[seconds]": seconds})
        assert answer.status_code == 400 and answer.json()["error"]["param"] == "expires_after", answer.text
        ascii_digits = _upload(client, "a", b"x", **{"expires_after[anchor]": "created_at",
                                                     "expires_after[seconds]": "3600"})
        assert ascii_digits.status_code == 200 and ascii_digits.json()["expires_at"] is not None


def test_expires_after_nested_past_the_parsers_stack_is_the_400_of_a_bad_value(tmp_path):
    with TestClient(build_app(_config(tmp_path))) as client:   # QA163: a 500 with a traceback
        for depth in (100, 100_000):
            answer = _upload(client, "a", b"x", expires_after="[" * depth + "]" * depth)
            assert answer.status_code == 400, answer.text
            assert (answer.json()["error"]["param"], answer.json()["error"]["code"]) == ("expires_after", "invalid_value")


def test_file_bytes_per_tenant_is_checked_at_load_and_waits_for_the_next_start_on_reload(tmp_path):
    assert _config(tmp_path).file_bytes_per_tenant == TEN_GIB
    assert _config(tmp_path, file_bytes_per_tenant=0).file_bytes_per_tenant == 0
    for bad, problem in ((-1, "must be >= 0"), (1.5, "must be an integer"), (True, "must be an integer"),
                         ("10GiB", "must be an integer")):
        with pytest.raises(ConfigError, match=f"server.file_bytes_per_tenant {problem}"):
            _config(tmp_path, file_bytes_per_tenant=bad)
    path = tmp_path / "gw.toml"
    path.write_text("[server]\nfile_bytes_per_tenant = 1000\n" + MODEL + _tenant("a", "sk-a"))
    state = build_app(parse_config({"models": [{"name": "mock", "kind": "upstream",
                                                "litellm_model": "openai/gpt-4o-mini",
                                                "litellm_params": {"mock_response": "hi"}}],
                                    "tenants": [{"name": "a", "api_key_sha256": [key_digest("sk-a")]}]}),
                      config_path=str(path)).state.gateway
    report = asyncio.run(reload_tenants(state, path))
    assert report.at_next_start == ("[server] file_bytes_per_tenant",)
    assert state.config.file_bytes_per_tenant == TEN_GIB   # as max_file_bytes: next start

