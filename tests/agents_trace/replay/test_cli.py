"""The replay command refuses bad arguments and traces before it connects to anything."""
import pytest

from gateway.cli import main


@pytest.mark.parametrize("flags,message", [
    (["--speed", "0"], "--speed must be positive"),
    (["--concurrency", "0"], "--concurrency and --limit must be at least 1"),
    (["--limit", "0"], "--concurrency and --limit must be at least 1"),
    (["--tenant-key", "acme"], "--tenant-key expects TENANT=KEY"),
])
def test_replay_bad_flags_are_errors(tmp_path, capsys, flags, message):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"t": 0, "input_tokens": 16, "output_tokens": 1, "hash_ids": [1]}\n')
    assert main(["replay", str(trace), "--base-url", "http://127.0.0.1:9", "--api-key", "k", *flags]) == 2
    assert f"error: {message}" in capsys.readouterr().err


@pytest.mark.parametrize("content,message", [
    (None, "cannot read"), ("", "holds no requests"), ('{"bad": 1}\n', "cannot read"),
    ("\udcff", "not UTF-8 text"),
])
def test_replay_unreadable_or_empty_traces_are_errors(tmp_path, capsys, content, message):
    trace = tmp_path / "t.jsonl"
    if content is not None:
        trace.write_bytes(content.encode("utf-8", "surrogateescape"))   # "\udcff": the byte 0xFF
    assert main(["replay", str(trace), "--base-url", "http://127.0.0.1:9", "--api-key", "k"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err
