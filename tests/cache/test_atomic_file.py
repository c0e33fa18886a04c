from __future__ import annotations

import pytest

from cache.atomic_file import replacing


def test_the_new_content_appears_only_when_the_block_ends(tmp_path):
    path = tmp_path / "trace.jsonl"
    path.write_text("old\n")
    with replacing(path) as stream:
        stream.write("new\n")
        assert path.read_text() == "old\n"   # not yet
    assert path.read_text() == "new\n"
    assert [p.name for p in tmp_path.iterdir()] == ["trace.jsonl"]


@pytest.mark.parametrize("interruption", [KeyboardInterrupt, OSError])
def test_an_interrupted_write_keeps_the_old_file_and_leaves_no_partial(tmp_path, interruption):
    path = tmp_path / "trace.jsonl"
    path.write_text("old\n")
    with pytest.raises(interruption):
        with replacing(path) as stream:
            stream.write("half")
            raise interruption()
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["trace.jsonl"]


def test_an_interrupted_first_write_leaves_nothing(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        with replacing(tmp_path / "new.jsonl") as stream:
            stream.write("half")
            raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []


def test_bytes_are_written_the_same_way(tmp_path):
    path = tmp_path / "arrays.npz"
    with replacing(path, binary=True) as stream:
        stream.write(b"\x00\x01")
        assert not path.exists()
    assert path.read_bytes() == b"\x00\x01" and [p.name for p in tmp_path.iterdir()] == ["arrays.npz"]


@pytest.mark.parametrize("given", [".", "/", "", "..", "{dir}", "{dir}/", "{dir}/missing/x.jsonl", "{dir}/new/"])
def test_a_path_it_cannot_replace_is_an_oserror_naming_that_path(tmp_path, monkeypatch, given):
    monkeypatch.chdir(tmp_path)
    given = given.format(dir=tmp_path)
    with pytest.raises(OSError) as raised:
        with replacing(given) as stream:
            stream.write("never")
    assert raised.value.filename == given and raised.value.strerror
    assert "partial" not in str(raised.value)
    assert list(tmp_path.iterdir()) == []
