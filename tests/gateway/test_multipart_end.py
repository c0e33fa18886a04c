"""A multipart upload cut before its close delimiter is refused as such, not as a form
without its file (QA134 low: "Missing required parameter: 'file'"): the watch finds the
delimiter anywhere in the body's pieces, split across two of them included."""
from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from gateway.app import build_app
from gateway.multipart_end import CloseDelimiterWatch
from tests.gateway.test_http_edges import AUTH, _config, _form


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    with TestClient(build_app(_config(tmp_path_factory.mktemp("app")))) as test_client:
        yield test_client


def fed(watch: CloseDelimiterWatch, body: bytes, piece_bytes: int) -> CloseDelimiterWatch:
    for start in range(0, len(body), piece_bytes):
        watch.feed(body[start:start + piece_bytes])
    return watch


@pytest.mark.parametrize("piece_bytes", [1, 2, 3, 7, 10_000])
def test_the_close_delimiter_is_seen_however_the_body_is_cut_into_pieces(piece_bytes):
    whole, cut = _form(), _form()[:-len(b"--\r\n")]
    assert fed(CloseDelimiterWatch.of("multipart/form-data; boundary=edges"), whole, piece_bytes).problem() is None
    watch = fed(CloseDelimiterWatch.of("multipart/form-data; boundary=edges"), cut, piece_bytes)
    assert watch.problem() == "it ended before its closing boundary ('--edges--')"
    assert len(watch.tail) == len(b"\r\n--edges--") - 1


def test_the_boundary_text_inside_a_files_content_is_not_the_close_delimiter():
    """QA151: a file whose text holds `--edges--` made a cut body pass for whole."""
    body = _form().replace(b"hello", b"see --edges-- here")[:-len(b"\r\n--edges--\r\n")]
    assert fed(CloseDelimiterWatch.of("multipart/form-data; boundary=edges"), body, 5).problem() is not None
    empty_form = b"--edges--\r\n"   # no parts: the close delimiter first
    assert fed(CloseDelimiterWatch.of("multipart/form-data; boundary=edges"), empty_form, 3).problem() is None


def test_the_boundary_comes_from_the_content_type_quoted_or_not():
    assert CloseDelimiterWatch.of('multipart/form-data; boundary="a b"').delimiter == b"\r\n--a b--"
    assert CloseDelimiterWatch.of("multipart/form-data; charset=utf-8; boundary=xyz").delimiter == b"\r\n--xyz--"
    assert CloseDelimiterWatch.of("multipart/form-data") is None


@pytest.mark.parametrize("cut_bytes", [len(b"--\r\n"), len(b"edges--\r\n"), len(b"\r\n--edges--\r\n")])
def test_an_upload_cut_before_its_close_delimiter_says_so_and_keeps_nothing(client, cut_bytes):
    reply = client.post("/v1/files", content=_form()[:-cut_bytes],
                        headers={**AUTH, "Content-Type": "multipart/form-data; boundary=edges"})
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["message"] == ("The multipart body could not be read: "
                                "it ended before its closing boundary ('--edges--')"), error
    assert error["param"] == "file"
    assert client.get("/v1/files", headers=AUTH).json()["data"] == []
    whole = client.post("/v1/files", content=_form(), headers={**AUTH, "Content-Type": "multipart/form-data; boundary=edges"})
    assert whole.status_code == 200, whole.text
    assert client.delete(f"/v1/files/{whole.json()['id']}", headers=AUTH).status_code == 200
