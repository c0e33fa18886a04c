"""An upload past `[server] max_file_bytes` is a 413 even when its tenant's room left is
smaller too (QA206 F2): the per-file limit is checked before the room, since the quota's
advice (delete files) cannot make such a file fit; a file within the limit but past the
room is still the quota's 400. Nothing of either is kept."""
from __future__ import annotations

from starlette.testclient import TestClient

from gateway.app import build_app
from tests.gateway.test_file_storage_cap import STORAGE_FULL_CODE, _config, _upload

LIMIT = 200_000


def test_a_file_past_the_limit_is_a_413_when_the_tenants_room_is_smaller_too(tmp_path):
    with TestClient(build_app(_config(tmp_path, max_file_bytes=LIMIT, file_bytes_per_tenant=300_000))) as client:
        for _ in range(2):   # 50,000 bytes of room left: less than the form's slack past it
            assert _upload(client, "a", b"x" * 125_000).status_code == 200
        over = _upload(client, "a", b"x" * (LIMIT + 1))   # past the limit and past the room
        assert over.status_code == 413, over.text
        assert over.json()["error"] == {"message": f"The file is {LIMIT + 1} bytes, past the limit of {LIMIT} bytes "
                                                   "on an uploaded file (`[server] max_file_bytes`).",
                                        "type": "invalid_request_error", "param": None, "code": "request_too_large"}
        at_limit = _upload(client, "a", b"x" * LIMIT)   # within the limit, past the room: the quota's 400
        assert at_limit.status_code == 400, at_limit.text
        assert (at_limit.json()["error"]["code"], at_limit.json()["error"]["param"]) == (STORAGE_FULL_CODE, "file")
        assert [file["bytes"] for file in client.get("/v1/files", headers={"Authorization": "Bearer k-cap-a"}
                                                     ).json()["data"]] == [125_000, 125_000]


def test_the_413_names_the_file_limit_not_the_bodys_and_a_file_of_the_limit_in_a_larger_body_is_taken(tmp_path):
    """QA231 F3: the 413 read "Request body exceeds the limit of N bytes", though the limit
    is on the file's bytes: a file of exactly the limit, in a body larger than it, is taken."""
    with TestClient(build_app(_config(tmp_path, max_file_bytes=LIMIT))) as client:
        at_limit = _upload(client, "a", b"x" * LIMIT)
        assert at_limit.status_code == 200 and int(at_limit.request.headers["content-length"]) > LIMIT
        over = _upload(client, "a", b"x" * (LIMIT + 10))
        assert over.status_code == 413 and over.json()["error"]["message"] == (
            f"The file is {LIMIT + 10} bytes, past the limit of {LIMIT} bytes on an uploaded file "
            "(`[server] max_file_bytes`).")
        chunked = client.post("/v1/files", headers={"Authorization": "Bearer k-cap-a", "content-type": (
            "multipart/form-data; boundary=b")}, content=iter([b"--b\r\nContent-Disposition: form-data; name=\"file\"; "
                                                               b"filename=\"f\"\r\n\r\n"] + [b"x" * 100_000] * 4))
        declared = client.post("/v1/files", headers={"Authorization": "Bearer k-cap-a", "content-type": (
            "multipart/form-data; boundary=b")}, content=b"x" * (LIMIT + 70_000))
        for refused in (chunked, declared):   # the file not read to its end: the body is past the limit and the slack
            assert refused.status_code == 413, refused.text
            assert refused.json()["error"]["message"] == (
                f"This upload's body is past the limit of {LIMIT} bytes on an uploaded file (`[server] "
                "max_file_bytes`) and the 65536 bytes of the form around it.")
            assert refused.json()["error"]["code"] == "request_too_large"
