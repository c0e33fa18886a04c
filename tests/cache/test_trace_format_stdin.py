"""`-` names stdin to the trace reader, and so to `python -m cache.sim --trace -` (as
`stepahead workload generate -o -` names stdout): a generated workload pipes straight in."""
from __future__ import annotations

import json
import subprocess
import sys

TEXT = ('{"format": "stepahead-trace/1", "block_size": 16}\n'
        '{"t": 0, "session": "s", "input_tokens": 32, "output_tokens": 1}\n'
        '{"t": 1, "session": "s", "input_tokens": 48, "output_tokens": 1}\n')


def _python(*args: str, stdin: bytes | None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], input=stdin, capture_output=True, timeout=120)


def test_the_reader_reads_a_dash_from_stdin_and_leaves_stdin_open():
    done = _python("-c", "import sys; from cache.trace_format import read_trace; header, records = read_trace('-'); "
                         "print(header.block_size, len(records), sys.stdin.closed)",
                   stdin=b"\xef\xbb\xbf" + TEXT.encode())
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert done.stdout.decode().split() == ["16", "2", "False"]


def test_the_simulator_reads_its_trace_from_stdin():
    done = _python("-m", "cache.sim", "--trace", "-", "--hot-blocks", "100", "--json", stdin=TEXT.encode())
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    row = json.loads(done.stdout)
    assert row["requests"] == 2 and row["block_hit_rate"] > 0   # the second step finds the first's two blocks


def test_a_bad_trace_on_stdin_is_the_readers_one_line():
    done = _python("-m", "cache.sim", "--trace", "-", "--hot-blocks", "100", "--json", stdin=b"not json\n")
    assert done.returncode == 2 and done.stdout == b""
    assert done.stderr.decode() == "error: cannot read -: line 1: not JSON (Expecting value)\n"


def test_a_closed_stdin_is_an_error_line_not_a_traceback():
    done = subprocess.run(f"exec 0<&-; {sys.executable} -m cache.sim --trace - --hot-blocks 100 --json", shell=True,
                          capture_output=True, timeout=120)
    assert done.returncode == 2 and done.stderr.decode() == "error: cannot read -: [Errno 9] stdin is closed\n"
