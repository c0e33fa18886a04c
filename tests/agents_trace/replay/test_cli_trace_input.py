"""What `stepahead replay` reads as its trace: `-` is stdin (as `workload generate -o -`
writes stdout), a file saved with a UTF-8 byte-order mark loads, and a trace whose
replay would run over a day (a time in the wrong unit, most often) is refused before
anything connects instead of waiting in silence."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gateway.cli import main

LINES = [{"t": 0, "tenant": "acme", "session": "s", "input_tokens": 8, "output_tokens": 1},
         {"t": 0.2, "tenant": "acme", "session": "s", "input_tokens": 12, "output_tokens": 1}]


@pytest.fixture
def fake_gateway():
    from tests.agents_trace.replay.fake_gateway import start_fake_gateway

    gateway = start_fake_gateway()
    yield gateway
    gateway.stop()


def _replay(trace: str, base_url: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agents_trace.replay", trace, "--base-url", base_url,
                           "--api-key", "k", "--model", "m", "--no-progress", "--json"],
                          input=stdin, capture_output=True, timeout=60)


def test_a_dash_replays_the_trace_on_stdin(fake_gateway):
    text = "".join(json.dumps(line) + "\n" for line in LINES).encode()
    done = _replay("-", fake_gateway.base_url, stdin=text)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.decode().splitlines()[-1])["total"]["requests"] == 2
    assert [len(body["prompt"]) for body in fake_gateway.bodies] == [8, 12]


def test_a_trace_saved_with_a_byte_order_mark_is_replayed(tmp_path, fake_gateway):
    trace = tmp_path / "bom.jsonl"
    trace.write_bytes(b"\xef\xbb\xbf" + "".join(json.dumps(line) + "\n" for line in LINES).encode())
    done = _replay(str(trace), fake_gateway.base_url)
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(fake_gateway.bodies) == 2


@pytest.mark.parametrize("times,due", [((0, 1e300), "1e+300"), ((1764900000.0, 1764900000500.0, 1764900001.5), None)])
def test_a_trace_whose_replay_would_run_over_a_day_is_refused_before_it_connects(tmp_path, capsys, times, due):
    """1e300 s; and one line in milliseconds among epoch seconds (its time goes back after
    it, so it is the last line here)."""
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"t": t, "input_tokens": 4, "output_tokens": 1}) + "\n"
                             for t in sorted(times)))
    assert main(["replay", str(trace), "--base-url", "http://127.0.0.1:9", "--api-key", "k", "--model", "m",
                 "--no-progress"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith(f"error: {trace}: the replay would run for at least ")
    assert f"its request {len(times)} of {len(times)} is due" in captured.err
    assert "a replay runs at most 86,400 s (a day)" in captured.err   # cli.MAX_REPLAY_S, documented
    assert "raise --speed" in captured.err and len(captured.err) < 400   # no 300-digit number
    if due is not None:
        assert f"at least {due} s at --speed 1:" in captured.err


def test_a_long_trace_sped_up_to_under_a_day_or_cut_before_its_jump_is_replayed(tmp_path, fake_gateway):
    """The bound is on the replay's own time: --speed brings a two-day trace under it, and
    --limit leaves out a line after the jump."""
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"t": t, "input_tokens": 4, "output_tokens": 1}) + "\n"
                             for t in (0, 0.1, 2 * 86_400)))
    refused = subprocess.run([sys.executable, "-m", "agents_trace.replay", str(trace), "--base-url",
                              fake_gateway.base_url, "--api-key", "k", "--model", "m", "--no-progress"],
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "at least 172800 s at --speed 1" in refused.stderr
    done = subprocess.run([sys.executable, "-m", "agents_trace.replay", str(trace), "--base-url",
                           fake_gateway.base_url, "--api-key", "k", "--model", "m", "--no-progress", "--json",
                           "--limit", "2"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(fake_gateway.bodies) == 2


def test_an_empty_stdin_is_named_stdin():
    """QA210 F5: not `error: - holds no requests to replay`."""
    done = _replay("-", "http://127.0.0.1:9", stdin=b"")
    assert done.returncode == 2 and done.stdout == b""
    assert done.stderr.decode() == "error: stdin holds no requests to replay\n"


def test_lines_of_0_input_or_output_tokens_are_sent_as_1_and_counted_on_stderr(tmp_path, fake_gateway):
    """QA210 F3: a request needs one token of each; the replay says how many lines it raised."""
    trace = tmp_path / "zero.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 0, "output_length": 0, "hash_ids": []}\n'
                     '{"timestamp": 1, "input_length": 16, "output_length": 0, "hash_ids": [1]}\n'
                     '{"timestamp": 2, "input_length": 16, "output_length": 3, "hash_ids": [2]}\n')
    done = _replay(str(trace), fake_gateway.base_url)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr.decode().splitlines()[0] == \
        "stepahead replay: 2 line(s) of 0 input or output tokens are sent as 1"
    sent = sorted((len(body["prompt"]), body["max_tokens"]) for body in fake_gateway.bodies)   # ms apart
    assert sent == [(1, 1), (16, 1), (16, 3)]
    done = _replay("-", fake_gateway.base_url, stdin=json.dumps(LINES[0]).encode() + b"\n")
    assert done.returncode == 0 and b"are sent as 1" not in done.stderr   # none raised: no line
