"""examples/replay_and_compare.sh end to end on the tiny model (two gateway starts per run,
so each run serves as many checks as it can): on a generated workload (exit 0), on a
recorded trace with one prompt past the model's context (its errors shown, exit 1), its
early stop when the model does not load, the trace is bad or its PORT is taken."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.gateway.serving import free_port

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "replay_and_compare.sh"
USER_PLACES = ("STEPAHEAD_TRACE_DB", "STEPAHEAD_RESPONSES_DB", "STEPAHEAD_PREDICTOR_DIR", "STEPAHEAD_SPENT_TOKENS")


def _run_script(tmp_path: Path, **knobs: str) -> subprocess.CompletedProcess:
    if shutil.which("stepahead") is None or shutil.which("curl") is None:
        pytest.skip("needs the installed `stepahead` command and curl")
    knobs.setdefault("PORT", str(free_port()))
    # as a user's shell: no store places named in the environment, a data folder of its own
    env = {name: value for name, value in os.environ.items() if name not in USER_PLACES}
    env.update(HOT_BLOCKS="256", XDG_DATA_HOME=str(tmp_path / "user-data"), **knobs)
    return subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=420, env=env)


def test_replay_and_compare_replays_a_recorded_trace_with_its_own_tenants_shows_why_requests_failed_and_exits_1(
        tmp_path):
    """A recorded trace (two tenants, one a name TOML must quote, each a session of two
    steps) replays under both policies with the tenants' own keys; one more request, a
    prompt past the tiny model's context, fails under both: the comparison still prints,
    then each policy's first errors, and the status is 1."""
    trace = tmp_path / "recorded.jsonl"
    rows = [{"format": "stepahead-trace/1", "block_size": 64, "time_unit": "s"}]
    for tenant, first_id in (('team "a"', 100), ("b", 200)):   # a name TOML must quote
        for step in range(2):
            rows.append({"t": step * 0.2, "tenant": tenant, "session": f"{tenant}-s", "after": "start" if step == 0
                         else "tool:search", "tool_calls": ["search"] if step == 0 else [],
                         "input_tokens": 64 * (2 + step), "output_tokens": 4,
                         "hash_ids": list(range(first_id, first_id + 2 + step))})
    rows.append({"t": 0.1, "tenant": "b", "session": "too-long", "input_tokens": 9000, "output_tokens": 2,
                 "hash_ids": list(range(1000, 1000 + (9000 + 63) // 64))})
    rows[1:] = sorted(rows[1:], key=lambda row: row["t"])   # a trace's lines are in arrival order
    trace.write_text("".join(json.dumps(row) + "\n" for row in rows))
    done = _run_script(tmp_path, MODEL="tiny", SPEED="10", TRACE=str(trace))
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-3000:]
    compared = json.loads(done.stdout.strip().splitlines()[-1])["comparison"]
    assert set(compared) == {"predictive", "lru"}
    for row in compared.values():
        assert (row["requests"], row["errors"]) == (5, 1)   # a wrong tenant key would fail the other four
        assert row["cached_tokens"] >= 2 * 128   # each session's second step finds its first's blocks
        assert row["cached_token_share"] > 0
    assert "LRU / predictive mean TTFT" in done.stdout
    assert "differs by noise only" not in done.stdout   # not said of a comparison with failed requests
    for policy in ("predictive", "lru"):
        assert f"replay_and_compare: 1 of the {policy} replay's 5 requests failed" in done.stderr
    assert done.stderr.count("maximum context length") == 2 and "MAX_INPUT_TOKENS=N" in done.stderr


def test_replay_and_compare_replays_a_generated_workload_under_both_policies_exits_0_and_says_if_ttft_differs_by_noise(
        tmp_path):
    done = _run_script(tmp_path, MODEL="tiny", TENANTS="2", SESSIONS="1", SPEED="200")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    rows = json.loads(done.stdout.strip().splitlines()[-1])["comparison"]
    assert set(rows) == {"predictive", "lru"}
    for row in rows.values():
        assert row["requests"] > 0 and row["errors"] == 0 and row["cached_token_share"] > 0
    assert rows["predictive"]["requests"] == rows["lru"]["requests"]   # the same workload
    assert "LRU / predictive mean TTFT" in done.stdout
    same_share = rows["predictive"]["cached_token_share"] == rows["lru"]["cached_token_share"]
    assert ("their TTFT differs by noise only" in done.stdout) == same_share
    # QA178: its gateways kept their stores in its scratch folder, so they never took up (and failed)
    # the batches a user's own gateway left unfinished in the user's data folder
    assert not any((tmp_path / "user-data").rglob("*")), list((tmp_path / "user-data").rglob("*"))


def test_replay_and_compare_generates_a_workload_and_stops_with_the_servers_reason_when_the_model_fails(tmp_path):
    missing = tmp_path / "no-such-model"
    done = _run_script(tmp_path, MODEL=str(missing), TENANTS="2", SESSIONS="1")
    assert done.returncode == 1
    assert "in 2 sessions of 2 tenant(s)" in done.stderr   # the workload was generated first
    assert str(missing) in done.stderr and "Traceback" not in done.stderr
    assert "comparison" not in done.stdout


def test_replay_and_compare_stops_on_a_bad_trace_with_the_readers_error_before_any_gateway(tmp_path):
    header = '{"format": "stepahead-trace/1", "block_size": 16}\n'
    cases = {"garbage.jsonl": (header + '{"t": 0, "input_tokens": 4, "output_tokens": 1}\nnot json\n',
                               "line 3: not JSON"),
             "header_only.jsonl": (header, "holds no requests"),
             "t_string.jsonl": (header + '{"t": "0", "input_tokens": 4, "output_tokens": 1}\n',
                                "line 2: 't' must be a non-negative number of seconds")}
    for name, (text, message) in cases.items():
        trace = tmp_path / name
        trace.write_text(text)
        done = _run_script(tmp_path, MODEL="tiny", TRACE=str(trace))
        assert done.returncode == 2, (name, done.stderr[-2000:])
        assert done.stderr.startswith("replay_and_compare: ") and message in done.stderr, done.stderr[-2000:]
        assert done.stderr.count("\n") == 1 and done.stdout == ""   # no gateway started, no traceback


def _trace(path: Path, input_tokens: tuple[int, ...]) -> Path:
    rows = [{"format": "stepahead-trace/1", "block_size": 64, "time_unit": "s"}]
    rows += [{"t": 0.1 * i, "session": f"s{i}", "input_tokens": n, "output_tokens": 2,
              "hash_ids": list(range(1000 * i, 1000 * i + (n + 63) // 64))} for i, n in enumerate(input_tokens)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_replay_and_compare_refuses_a_port_another_server_answers_on(tmp_path):
    """Another server on PORT answers /health (and every request): the script must not
    compare that server; it stops before starting any gateway."""
    from tests.agents_trace.replay.fake_gateway import start_fake_gateway

    other = start_fake_gateway()
    try:
        port = other.server.server_address[1]
        done = _run_script(tmp_path, MODEL="tiny", PORT=str(port), TRACE=str(_trace(tmp_path / "t.jsonl", (64,))))
    finally:
        other.stop()
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-3000:]
    assert done.stderr == (f"replay_and_compare: cannot use PORT={port}: Address already in use "
                           "(another server listens there? pick another PORT)\n")
    assert other.bodies == [] and done.stdout == ""
