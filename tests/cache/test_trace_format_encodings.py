"""How a trace file's bytes are read: UTF-8 with or without a byte-order mark (an editor's
"UTF-8 with BOM" loads, as the gateway's config does), and a compressed file refused as
one, naming its compression and what to do, not as "not UTF-8 text"."""
from __future__ import annotations

import bz2
import gzip
import lzma

import pytest

from cache.sim.cli import main as sim_main
from cache.trace_format import TraceFormatError, read_trace

TEXT = '{"format": "stepahead-trace/1", "block_size": 16}\n{"t": 0, "input_tokens": 10, "output_tokens": 5}\n'


def test_a_trace_with_a_byte_order_mark_reads_as_without_one(tmp_path):
    plain, marked = tmp_path / "plain.jsonl", tmp_path / "bom.jsonl"
    plain.write_text(TEXT, encoding="utf-8")
    marked.write_bytes(b"\xef\xbb\xbf" + TEXT.encode())
    assert read_trace(marked) == read_trace(plain)
    assert read_trace(marked)[0].block_size == 16   # the header, behind the mark, is read as one


def test_a_headerless_trace_with_a_byte_order_mark_loads_in_the_simulator(tmp_path, capsys):
    trace = tmp_path / "bom.jsonl"
    trace.write_bytes(b'\xef\xbb\xbf{"t":0,"input_tokens":10,"output_tokens":5}\n')
    assert sim_main(["--trace", str(trace), "--hot-blocks", "10", "--json"]) == 0
    assert '"requests": 1' in capsys.readouterr().out


@pytest.mark.parametrize("compress,name,cat", [(gzip.compress, "gzip", "zcat"), (lzma.compress, "xz", "xzcat"),
                                               (bz2.compress, "bzip2", "bzcat"),
                                               (lambda data: b"\x28\xb5\x2f\xfd" + data, "zstd", "zstdcat")])
def test_a_compressed_trace_is_named_as_one(tmp_path, compress, name, cat):
    trace = tmp_path / "t.jsonl.z"
    trace.write_bytes(compress(TEXT.encode()))
    with pytest.raises(TraceFormatError) as error:
        read_trace(trace)
    assert str(error.value) == (f"{name}-compressed, not JSONL text: decompress it first ({cat} it to a file, "
                                f"or pipe {cat}'s output in, naming the trace -)")


def test_the_simulator_names_a_gzip_trace_in_its_one_error_line(tmp_path, capsys):
    trace = tmp_path / "t.jsonl.gz"
    trace.write_bytes(gzip.compress(TEXT.encode()))
    assert sim_main(["--trace", str(trace), "--hot-blocks", "10", "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.err == (f"error: cannot read {trace}: gzip-compressed, not JSONL text: decompress it first "
                            "(zcat it to a file, or pipe zcat's output in, naming the trace -)\n")


def test_other_bytes_that_are_not_utf8_are_still_called_so(tmp_path):
    trace = tmp_path / "latin1.jsonl"
    trace.write_bytes(b'{"t": 0, "tenant": "caf\xe9", "input_tokens": 1, "output_tokens": 1}\n')
    with pytest.raises(TraceFormatError, match="not UTF-8 text"):
        read_trace(trace)
