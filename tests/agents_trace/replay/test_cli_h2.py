"""The replay command's promise that `--json` always prints its line on Ctrl+C holds from
the moment the command runs, while it reads the trace too; and a replay that fell behind
its schedule (its --concurrency full) says so on stderr and in `total`."""
from __future__ import annotations

import json

import pytest

import agents_trace.replay.cli as replay_cli
from gateway.cli import main


def _interrupt(*args, **kwargs):
    raise KeyboardInterrupt


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "table"])
def test_ctrl_c_while_the_trace_is_read_prints_a_zero_count_report(tmp_path, capsys, monkeypatch, as_json):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"t": 0, "input_tokens": 4, "output_tokens": 1}\n')
    monkeypatch.setattr(replay_cli, "read_trace", _interrupt)
    flags = ["--json"] if as_json else []
    assert main(["replay", str(trace), "--base-url", "http://127.0.0.1:18910", "--api-key", "k", "--no-progress",
                 *flags]) == 130
    out, err = capsys.readouterr()
    assert err == "stepahead replay: stopped before the replay started (while reading the trace)\n"
    if as_json:
        [line] = out.splitlines()
        report = json.loads(line)
        assert report["total"]["requests"] == 0 and report["interrupted"] == {"requests_left_out": None}
    else:
        assert out.splitlines()[-1] == "interrupted: stopped before the trace was read"


def test_ctrl_c_after_the_trace_was_read_counts_every_request_left_out(tmp_path, capsys, monkeypatch):
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(f'{{"t": {t}, "input_tokens": 4, "output_tokens": 1}}\n' for t in range(3)))
    monkeypatch.setattr(replay_cli, "ReplayOptions", _interrupt)
    assert main(["replay", str(trace), "--base-url", "http://127.0.0.1:18910", "--api-key", "k", "--no-progress",
                 "--json"]) == 130
    out, err = capsys.readouterr()
    assert "stopped before the replay started (0 of 3 requests sent)" in err
    assert json.loads(out)["interrupted"] == {"requests_left_out": 3}


def test_a_replay_held_back_by_its_concurrency_warns_and_reports_the_send_lag(tmp_path, capsys):
    from tests.agents_trace.replay.fake_gateway import start_fake_gateway

    gateway = start_fake_gateway(hold_s=0.4)
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"t": 0, "input_tokens": 4, "output_tokens": 1}\n' * 3)   # three at once, one slot
    try:
        assert main(["replay", str(trace), "--base-url", gateway.base_url, "--api-key", "k", "--model", "m",
                     "--no-progress", "--json", "--concurrency", "1"]) == 0
    finally:
        gateway.stop()
    out, err = capsys.readouterr()
    total = json.loads(out)["total"]
    assert total["requests_sent_late"] >= 2 and total["send_lag_max_s"] >= 0.7   # the third waited for two
    assert "warning: the replay fell behind its schedule" in err and "raise --concurrency" in err
