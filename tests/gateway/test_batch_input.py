"""A batch's input file checked as `batch_requests` checks it, kept as its lines' places,
each request read from the file again when asked; the file closed without waiting on a
read under way."""
import json
import sys
import threading

import pytest

import gateway.batch_input as batch_input_module
from gateway.batch_input import CHUNK_BYTES, CHUNK_LINES, BatchInput, BatchLine, InputChanged
from gateway.batch_lines import batch_requests

URL = "/v1/chat/completions"


def _line(custom_id: str, content: str = "hi", model: str = "m") -> str:
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": URL,
                       "body": {"model": model, "messages": [{"role": "user", "content": content}]}})


def _opened(tmp_path, data: bytes):
    path = tmp_path / "in.jsonl"
    path.write_bytes(data)
    return BatchInput.opened(path, URL)


def test_a_good_file_reads_back_the_requests_batch_requests_gives(tmp_path):
    data = "\n".join([_line("a"), "", "  ", _line("b", "é ✓ \u2028"), _line("c", "x" * 5000)]).encode() + b"\r\n" \
        + _line("d").encode() + b"\r\n\n"
    checked, errors = _opened(tmp_path, data)
    assert errors == [] and checked.model == "m"
    assert [line.custom_id for line in checked.lines] == ["a", "b", "c", "d"]
    assert checked.requests(checked.lines) == batch_requests(data, URL)[0]
    assert all(not data[line.offset:line.offset + line.length].endswith(b"\r") for line in checked.lines)
    checked.close()


def test_a_bad_file_gives_the_errors_batch_requests_gives_and_is_not_held(tmp_path):
    for data in (b"", b"\n\n", "\n".join([_line("a"), "not json", _line("a"), _line("b", model="n")]).encode()):
        checked, errors = _opened(tmp_path, data)
        assert checked.file is None and checked.lines == [] and errors == batch_requests(data, URL)[1] and errors


def test_what_a_line_keeps_does_not_grow_with_its_body(tmp_path):
    checked, _ = _opened(tmp_path, "\n".join([_line("a"), _line("b", "x" * 100_000)]).encode())
    small, large = checked.lines
    assert sys.getsizeof(small) == sys.getsizeof(large) and large.length > 100_000
    assert [type(value) for value in (large.custom_id, large.offset, large.length)] == [str, int, int]
    checked.close()


def test_runs_of_lines_are_bounded_in_lines_and_bytes():
    checked = BatchInput.empty()
    lines = [BatchLine(f"r{n}", n * 10, 10) for n in range(150)]
    runs = list(checked.chunks(lines, CHUNK_LINES))
    assert [len(run) for run in runs] == [CHUNK_LINES, CHUNK_LINES, 150 - 2 * CHUNK_LINES]
    assert [line for run in runs for line in run] == lines
    big = [BatchLine("a", 0, CHUNK_BYTES - 1), BatchLine("b", 0, 1), BatchLine("c", 0, 2),
           BatchLine("d", 0, CHUNK_BYTES + 5), BatchLine("e", 0, 1)]   # (a line past CHUNK_BYTES: a run alone)
    assert [[line.custom_id for line in run] for run in checked.chunks(big, CHUNK_LINES)] == [
        ["a", "b"], ["c"], ["d"], ["e"]]


def test_a_line_changed_since_it_was_checked_is_refused(tmp_path):
    checked, _ = _opened(tmp_path, "\n".join([_line("a"), _line("b")]).encode())
    path = tmp_path / "in.jsonl"
    path.write_bytes(path.read_bytes().replace(b'"b"', b'"c"'))   # (same inode: the open file sees it)
    assert checked.requests(checked.lines[:1])[0].custom_id == "a"
    with pytest.raises(InputChanged):
        checked.requests(checked.lines[1:])
    checked.close()


def test_close_during_a_read_does_not_wait_and_the_file_is_closed_when_the_read_ends(tmp_path, monkeypatch):
    checked, _ = _opened(tmp_path, "\n".join([_line("a"), _line("b")]).encode())
    reading, go = threading.Event(), threading.Event()
    loads = batch_input_module.loads_standard

    def held_loads(raw):
        reading.set()
        assert go.wait(10)
        return loads(raw)
    monkeypatch.setattr(batch_input_module, "loads_standard", held_loads)
    read: list = []
    reader = threading.Thread(target=lambda: read.extend(checked.requests(checked.lines)))
    reader.start()
    assert reading.wait(10)
    checked.close()   # returns at once; the read goes on
    assert not checked.file.closed
    go.set()
    reader.join(10)
    assert [request.custom_id for request in read] == ["a", "b"] and checked.file.closed
