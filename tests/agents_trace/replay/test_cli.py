"""The replay command refuses bad arguments and traces before it connects to anything."""
import pytest

from agents_trace.replay.cli import unknown_tenants_warning
from cache.trace_format import TraceRecord
from gateway.cli import main


@pytest.mark.parametrize("flags,message", [
    (["--speed", "0"], "--speed must be positive"),
    (["--concurrency", "0"], "--concurrency must be at least 1, got 0"),
    (["--limit", "0"], "--limit must be at least 1, got 0"),
    (["--limit", "-2"], "--limit must be at least 1, got -2"),
    (["--tenant-key", "acme"], "--tenant-key expects TENANT=KEY"),
    (["--speed", "nan"], "--speed must be positive and finite, got nan"),
    (["--speed", "inf"], "--speed must be positive and finite, got inf"),
    (["--vocab-size", "0"], "--vocab-size must be at least 5"),
    (["--vocab-size", "4"], "--vocab-size must be at least 5"),
    (["--max-output-tokens", "0"], "--max-output-tokens must be at least 1, got 0"),
    (["--max-output-tokens", "-1"], "--max-output-tokens must be at least 1, got -1"),
    (["--max-input-tokens", "0"], "--max-input-tokens must be at least 1, got 0"),
    (["--max-input-tokens", "-5"], "--max-input-tokens must be at least 1, got -5"),
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
