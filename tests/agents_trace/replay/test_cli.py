"""The replay command refuses bad arguments and traces before it connects to anything; and
against a stand-in gateway (fake_gateway.py): what it sends and when, and how it stops."""
import json
import signal
import subprocess
import sys
import time

import pytest

from agents_trace.replay.tenant_keys import unknown_tenants_warning
from cache.trace_format import TraceRecord
from gateway.cli import main


@pytest.mark.parametrize("flags,message", [
    (["--speed", "0"], "--speed must be positive"),
    (["--concurrency", "0"], "--concurrency must be at least 1, got 0"),
    (["--limit", "0"], "--limit must be at least 1, got 0"),
    (["--limit", "-2"], "--limit must be at least 1, got -2"),
    (["--tenant-key", "acme"], "--tenant-key expects TENANT=KEY"),
    (["--tenant-key", "sk-secret-key"], "--tenant-key expects TENANT=KEY, got an argument of 13 character(s) "
                                         "without '='"),   # the argument is not echoed: it may be a key
    (["--speed", "nan"], "--speed must be positive and finite, got nan"),
    (["--speed", "inf"], "--speed must be positive and finite, got inf"),
    (["--vocab-size", "0"], "--vocab-size must be at least 5"),
    (["--vocab-size", "4"], "--vocab-size must be at least 5"),
    (["--max-output-tokens", "0"], "--max-output-tokens must be at least 1, got 0"),
    (["--max-output-tokens", "-1"], "--max-output-tokens must be at least 1, got -1"),
    (["--max-input-tokens", "0"], "--max-input-tokens must be at least 1, got 0"),
    (["--max-input-tokens", "-5"], "--max-input-tokens must be at least 1, got -5"),
    (["--model", ""], "--model must name a model (leave it out for the gateway's first), got ''"),   # QA210 F5
    (["--model", " \t"], "--model must name a model (leave it out for the gateway's first), got ' \\t'"),
])
def test_replay_bad_flags_are_errors(tmp_path, capsys, flags, message):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"t": 0, "input_tokens": 16, "output_tokens": 1, "hash_ids": [1]}\n')
    assert main(["replay", str(trace), "--base-url", "http://127.0.0.1:9", "--api-key", "k", *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {message}") and err.count("\n") == 1


@pytest.mark.parametrize("content,message", [
    (None, "cannot read"), ("", "holds no requests"), ('{"bad": 1}\n', "cannot read"),
    ("\udcff", "not UTF-8 text"),
    ('{"timestamp": "x", "input_length": 5, "output_length": 8, "hash_ids": [1]}\n',
     "line 1: 'timestamp' must be a non-negative number of milliseconds"),
    ('{"timestamp": 0, "input_length": 5, "output_length": 8, "hash_ids": "abc"}\n',
     "line 1: 'hash_ids' must be a list of integers"),
])
def test_replay_unreadable_or_empty_traces_are_errors(tmp_path, capsys, content, message):
    trace = tmp_path / "t.jsonl"
    if content is not None:
        trace.write_bytes(content.encode("utf-8", "surrogateescape"))   # "\udcff": the byte 0xFF
    assert main(["replay", str(trace), "--base-url", "http://127.0.0.1:9", "--api-key", "k"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err


def test_unknown_tenants_warning_names_the_unknown_and_the_traces_tenants():
    records = [TraceRecord(0.0, 4, 1, tenant="b"), TraceRecord(1.0, 4, 1, tenant="a")]
    assert unknown_tenants_warning({"a": "k1", "b": "k2"}, records) is None
    assert unknown_tenants_warning({"a": "k1", "nosuch": "k2"}, records) == (
        "warning: --tenant-key for 'nosuch': the trace has no such tenant, so the key goes unused "
        "(its tenants: 'a', 'b')")
    many = [TraceRecord(0.0, 4, 1, tenant=f"t{i:02d}") for i in range(12)]
    assert unknown_tenants_warning({"x": "k"}, many).endswith("'t09' and 2 more)")


def test_replay_warns_once_about_a_tenant_key_the_trace_lacks(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"t": 0, "tenant": "acme", "input_tokens": 16, "output_tokens": 1}\n')
    main(["replay", str(trace), "--base-url", "http://127.0.0.1:9", "--api-key", "k", "--model", "m",
          "--no-progress", "--tenant-key", "nosuchtenant=KEY", "--tenant-key", "acme=K2"])
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert warnings == ["warning: --tenant-key for 'nosuchtenant': the trace has no such tenant, so the key "
                        "goes unused (its tenants: 'acme')"]


def test_replay_refuses_a_trace_whose_time_goes_back_before_it_connects(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(f'{{"t": {t}, "input_tokens": 16, "output_tokens": 1}}\n' for t in (0, 5, 4)))
    assert main(["replay", str(trace), "--base-url", "http://127.0.0.1:9", "--api-key", "k", "--model", "m",
                 "--no-progress"]) == 2
    assert capsys.readouterr().err == (f"error: cannot read {trace}: line 3: 't' is 4 s, before line 2's 5 s: a "
                                       "trace's lines are in arrival order (sort it by 't')\n")


def _replay(path, base_url: str, *flags: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agents_trace.replay", str(path), "--base-url", base_url,
                           "--api-key", "k", "--no-progress", "--json", *flags],
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def fake_gateway():
    from tests.agents_trace.replay.fake_gateway import start_fake_gateway

    gateway = start_fake_gateway()
    yield gateway
    gateway.stop()


def test_max_input_tokens_cuts_a_chat_lines_messages_keeping_the_head(tmp_path, fake_gateway):
    messages = [{"role": "system", "content": "s" * 100}, {"role": "user", "content": "u" * 3000},
                {"role": "user", "content": "later"}]
    trace = tmp_path / "chat.jsonl"
    trace.write_text(json.dumps({"t": 0, "input_tokens": 3100, "output_tokens": 2, "messages": messages}) + "\n")
    done = _replay(trace, fake_gateway.base_url, "--model", "m", "--max-input-tokens", "1000")
    assert done.returncode == 0, done.stderr[-2000:]
    [body] = fake_gateway.bodies
    sent = body["messages"]
    assert [m["role"] for m in sent] == ["system", "user"] and sent[0] == messages[0]
    assert 800 < len(sent[1]["content"]) < 1000 and set(sent[1]["content"]) == {"u"}


def test_replay_starts_at_the_first_lines_time(tmp_path, fake_gateway):
    """Epoch-second times (or a slice from the middle of a trace): the first request goes
    out at once, the next one the recorded gap later."""
    trace = tmp_path / "epoch.jsonl"
    trace.write_text("".join(json.dumps({"t": t, "input_tokens": 4, "output_tokens": 1}) + "\n"
                             for t in (1764900000.0, 1764900000.5)))
    began = time.monotonic()
    done = _replay(trace, fake_gateway.base_url, "--model", "m", timeout=30)
    assert done.returncode == 0, done.stderr[-2000:]
    assert time.monotonic() - began < 20 and len(fake_gateway.bodies) == 2
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["total"]["requests"] == 2 and report["wall_s"] < 5


def test_replay_with_a_model_stops_at_once_when_the_gateway_cannot_be_reached(tmp_path, capsys):
    from tests.gateway.serving import free_port

    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(f'{{"t": {t}, "input_tokens": 4, "output_tokens": 1}}\n' for t in (0, 30, 60)))
    base_url = f"http://127.0.0.1:{free_port()}"
    assert main(["replay", str(trace), "--base-url", base_url, "--api-key", "k", "--model", "m",
                 "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: cannot reach {base_url} (is the gateway up, on that port?)")
    assert err.count("\n") == 1


def test_ctrl_c_before_any_request_ended_still_prints_the_json_line(tmp_path):
    from tests.agents_trace.replay.fake_gateway import start_fake_gateway

    gateway = start_fake_gateway(hold_s=30.0)
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"t": 0, "input_tokens": 4, "output_tokens": 1}\n')
    try:
        replay = subprocess.Popen([sys.executable, "-m", "agents_trace.replay", str(trace), "--base-url",
                                   gateway.base_url, "--api-key", "k", "--model", "m", "--no-progress", "--json"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 30
            while not gateway.bodies:   # the request is in flight
                assert time.monotonic() < deadline and replay.poll() is None
                time.sleep(0.05)
            replay.send_signal(signal.SIGINT)
            stdout, stderr = replay.communicate(timeout=20)
        finally:
            replay.kill()
    finally:
        gateway.stop()
    assert replay.returncode == 130 and "stopped after 0 of 1 requests" in stderr, stderr[-2000:]
    report = json.loads(stdout.strip().splitlines()[-1])
    assert report["total"]["requests"] == 0 and report["interrupted"] == {"requests_left_out": 1}


def test_replay_stops_soon_with_its_own_status_when_the_gateway_stops_answering_mid_replay(tmp_path):
    """The gateway goes away after the first request: the replay stops about two seconds
    after the next one is refused, not after the trace's 18 s, with the partial report."""
    from tests.agents_trace.replay.fake_gateway import start_fake_gateway

    gateway = start_fake_gateway()
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"t": 2.0 * i, "session": "s", "input_tokens": 4, "output_tokens": 1}) + "\n"
                             for i in range(10)))
    began = time.monotonic()
    replay = subprocess.Popen([sys.executable, "-m", "agents_trace.replay", str(trace), "--base-url",
                               gateway.base_url, "--api-key", "k", "--model", "m", "--no-progress", "--json"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not gateway.bodies:
            assert time.monotonic() < deadline and replay.poll() is None
            time.sleep(0.05)
        gateway.stop()
        stdout, stderr = replay.communicate(timeout=60)
    finally:
        replay.kill()
    assert replay.returncode == 3, stderr[-2000:]   # cli.EXIT_GATEWAY_STOPPED, documented
    assert time.monotonic() - began < 12
    [line] = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert line.startswith(f"error: the gateway at {gateway.base_url} stopped answering after 1 request ("), line
    assert "3 probes of /v1/models over 2 s got no answer either" in line
    assert line.endswith("; the replay stopped after 2 of 10 requests (requests in flight were aborted)"), line
    assert "Traceback" not in stderr
    report = json.loads(stdout.strip().splitlines()[-1])
    assert (report["total"]["requests"], report["total"]["errors"]) == (2, 1)
    assert report["interrupted"] == {"requests_left_out": 8}


def test_replay_refuses_a_model_the_gateway_does_not_list_before_any_request(tmp_path, fake_gateway):
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(f'{{"t": {t}, "input_tokens": 4, "output_tokens": 1}}\n' for t in (0, 0.1)))
    done = _replay(trace, fake_gateway.base_url, "--model", "nosuch")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (f"error: the gateway at {fake_gateway.base_url} does not serve --model 'nosuch' "
                           "(its /v1/models lists: 'm')\n")
    assert fake_gateway.bodies == []
