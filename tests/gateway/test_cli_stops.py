"""`stepahead serve` started as a process and stopped: Ctrl-C during the start, a forced
stop with requests in flight, the shutdown timeout, SIGTERM with local and Ray workers
(the command's argument and config checks: test_cli.py)."""
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from gateway.cli import main
from gateway.config import key_digest
from tests.gateway import fake_openai
from tests.gateway.serving import STORE_ENV, free_port, served_then_stopped_by_sigterm, start_server, \
    wait_until_healthy


def _processes_with(marker: str) -> list[int]:
    """The running processes whose environment holds `marker` (this test's own tree)."""
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if marker.encode() in environ.read_bytes():
                found.append(int(environ.parent.name))
        except OSError:   # gone meanwhile, or not ours to read
            continue
    return found


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds the gateway's processes through /proc")
@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_while_the_gateway_starts_stops_the_start_at_once_and_leaves_nothing_running(tmp_path: Path,
                                                                                            stop_signal):
    port, marker = free_port(), f"STEPAHEAD_TEST_RUN={os.getpid()}-{time.monotonic_ns()}"
    process = subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "serve", "--model", "tiny", "--workers", "2", "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={"LITELLM_LOCAL_MODEL_COST_MAP": "True", "PATH": "/usr/bin:/bin",
             "PYTHONPATH": str(Path(__file__).resolve().parents[2]), marker.split("=")[0]: marker.split("=")[1],
             **{name: os.environ[name] for name in (*STORE_ENV, "STEPAHEAD_CACHE_DIR")}})
    try:
        seen = []
        while not seen or "Waiting for application startup" not in seen[-1]:   # the start is under way
            seen.append(process.stderr.readline())
            assert seen[-1], "".join(seen)
        assert process.pid in _processes_with(marker)   # the check below finds what runs
        process.send_signal(stop_signal)
        _, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert "stepahead: stopping the start in progress" in err and err.rstrip().endswith("stepahead: stopped")
    assert "model 'tiny' (tiny): 2 worker(s)" not in err   # the start did not finish first
    assert process.returncode == 128 + stop_signal
    assert "Traceback" not in err and "startup failed" not in err, err
    deadline = time.monotonic() + 10   # the fork server and the workers, killed, are gone
    while _processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _processes_with(marker) == []


def test_the_command_line_module_imports_no_subcommand_until_main_runs():
    """So a Ctrl+C during those imports reaches `main`'s handler (see the next test)."""
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, gateway.cli; print(sorted(m for m in sys.modules if m in "
         "('gateway.serve_command', 'agents_trace.replay.cli', 'agents_trace.traces_command', 'aiohttp')))"],
        capture_output=True, text=True, timeout=60, cwd=Path(__file__).resolve().parents[2])
    assert loaded.returncode == 0 and loaded.stdout.strip() == "[]", loaded.stderr[-2000:]


def test_ctrl_c_during_the_imports_or_a_command_stops_it_quietly(monkeypatch, capsys):
    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr("gateway.cli.commands", interrupted)
    assert main(["traces", "list"]) == 130
    assert capsys.readouterr().err == "stepahead: stopped\n"


def test_ctrl_c_before_uvicorn_takes_the_signals_over_stops_the_start_quietly(monkeypatch, capsys):
    """A Ctrl+C that reached the server's run before uvicorn's own signal handlers were in
    place exited 3 (a failed start) without a word; it is a stop, as at any other point."""
    import gateway.serve_command

    class Interrupted:
        started, start_cancelled_by = False, None

        def run(self):
            raise KeyboardInterrupt

    monkeypatch.setattr(gateway.serve_command, "_server_or_exit_status", lambda args: Interrupted())
    assert main(["serve", "--model", "tiny"]) == 130
    assert capsys.readouterr().err == "stepahead: stopped\n"


def test_ctrl_c_while_a_workload_is_generated_keeps_the_old_file_and_leaves_no_partial(tmp_path: Path):
    output = tmp_path / "workload.jsonl"
    output.write_text("the previous trace\n")
    process = subprocess.Popen(   # about 15 s of work: the signal lands in the imports, the generation or the write
        [sys.executable, "-m", "gateway.cli", "workload", "generate", "--tenants", "1", "--sessions", "20000",
         "--seed", "3", "-o", str(output)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        cwd=Path(__file__).resolve().parents[2])
    try:
        time.sleep(1.5)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130 and err.endswith("stepahead: stopped\n"), err[-2000:]
    assert "Traceback" not in err
    assert output.read_text() == "the previous trace\n"
    assert [p.name for p in tmp_path.iterdir()] == ["workload.jsonl"]


def test_a_request_cut_by_the_shutdown_timeout_is_reported_in_one_line():
    import asyncio
    import logging

    from gateway.uvicorn_server import CutRequests

    def report(exc: BaseException) -> logging.LogRecord:
        return logging.LogRecord("uvicorn.error", logging.ERROR, __file__, 1, "Exception in ASGI application\n",
                                 (), (type(exc), exc, None))

    cut = report(asyncio.CancelledError("Task cancelled, timeout graceful shutdown exceeded"))
    assert CutRequests().filter(cut) and cut.exc_info is None
    assert cut.getMessage() == "stepahead: a request in flight was cut: the shutdown timeout passed"
    forced = report(asyncio.CancelledError())   # a second Ctrl+C: the loop's end cancels what runs
    assert CutRequests().filter(forced) and forced.exc_info is None
    assert forced.getMessage() == "stepahead: a request in flight was cut: the stop was forced"
    lifespan = logging.LogRecord("uvicorn.error", logging.ERROR, __file__, 1, "Traceback (most recent call last):\n"
                                 '  File "x.py", line 1, in lifespan\nasyncio.exceptions.CancelledError\n', (), None)
    assert CutRequests().filter(lifespan)
    assert lifespan.getMessage() == "stepahead: the stop was forced: the shutdown did not wait for what was running"
    for other in (RuntimeError("graceful shutdown"),):   # left as they are
        record = report(other)
        assert CutRequests().filter(record) and record.exc_info[1] is other
    failed = logging.LogRecord("uvicorn.error", logging.ERROR, __file__, 1, "Traceback (most recent call last):\n"
                               "KeyError: 'x'\n", (), None)
    assert CutRequests().filter(failed) and failed.getMessage().endswith("KeyError: 'x'\n")


def _refuses_connections(port: int) -> bool:
    """Nothing accepts a connection on `port` (a stopping uvicorn closes its socket first)."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    except OSError:
        return True
    return False


def test_serve_with_config_answers_requests_and_a_forced_stop_with_requests_in_flight_logs_one_line_each_and_no_traceback(
        tmp_path: Path):
    """`serve --config FILE --port N` says where it serves and answers requests (one
    gateway started for both checks). A second Ctrl+C stops the gateway at once: the
    requests still running (one streamed, one not, both waiting on a silent upstream) are
    cut, each reported in one line, and so is the shutdown it cut short, instead of a
    traceback each (the lines are errors: `--log-level warning` keeps them)."""
    import threading

    # an upstream of its own, so the requests it holds are this test's two (its stop cuts them)
    fake_upstream = start_server(fake_openai.app, shutdown_timeout_s=0.1)
    config = tmp_path / "gw.toml"
    config.write_text(f"[[models]]\nname = 'fake'\nkind = 'upstream'\nlitellm_model = 'openai/fake-model'\n"
                      f"api_base = '{fake_upstream.base_url}/v1'\napi_key_env = 'STEPAHEAD_TEST_FAKE_KEY'\n"
                      "[[models]]\nname = 'mock'\nkind = 'upstream'\nlitellm_model = 'openai/gpt-4o-mini'\n"
                      "litellm_params = { mock_response = 'hi from cli' }\n"
                      f"[[tenants]]\nname = 't'\napi_key_sha256 = ['{key_digest('sk-t')}']\n")
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "serve", "--config", str(config), "--port", str(port),
         "--log-level", "warning"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={"LITELLM_LOCAL_MODEL_COST_MAP": "True", "PATH": "/usr/bin:/bin", "STEPAHEAD_TEST_FAKE_KEY": "sk-x",
             "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
             **{name: str(tmp_path / name) for name in STORE_ENV}})
    answers: list[object] = []

    def hanging(stream: bool) -> None:
        try:
            answers.append(httpx.post(f"{url}/chat/completions", headers={"authorization": "Bearer sk-t"}, timeout=30,
                                      json={"model": "fake", "stream": stream,
                                            "messages": [{"role": "user", "content": "hang"}]}).status_code)
        except httpx.HTTPError as error:
            answers.append(type(error).__name__)
    try:
        first_line = process.stdout.readline()
        assert f"http://127.0.0.1:{port}/v1" in first_line
        url = first_line.split()[-1]
        wait_until_healthy(port, process, timeout_s=60)
        reply = httpx.post(f"{url}/chat/completions", headers={"Authorization": "Bearer sk-t"},
                           json={"model": "mock", "messages": [{"role": "user", "content": "x"}]})
        assert reply.json()["choices"][0]["message"]["content"] == "hi from cli"
        clients = [threading.Thread(target=hanging, args=(stream,)) for stream in (True, False)]
        for client in clients:
            client.start()
        deadline = time.monotonic() + 30   # both requests wait on the silent upstream
        while len(fake_upstream.server.server_state.tasks) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(fake_upstream.server.server_state.tasks) == 2, "the requests never reached the upstream"
        process.send_signal(signal.SIGINT)
        deadline = time.monotonic() + 30   # the graceful stop has begun: it no longer accepts connections
        while not _refuses_connections(port) and time.monotonic() < deadline:
            time.sleep(0.02)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
        for client in clients:
            client.join(30)
    finally:
        if process.poll() is None:
            process.kill()
        fake_upstream.stop()
    assert process.returncode == 0, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    assert err.count("stepahead: a request in flight was cut: the stop was forced") == 2, err[-3000:]
    assert len(answers) == 2


def test_serve_announces_the_port_it_listens_on_once_started_and_a_sigterm_stop_exits_0(tmp_path: Path):
    """`--port 0`: the port the system gave, not 0, printed once the gateway answers; a
    clean stop by SIGTERM is a success, as one by Ctrl+C is (uvicorn raises the signal
    again once stopped, and SIGTERM's default action would end the process by it)."""
    served_then_stopped_by_sigterm(tmp_path, (
        "[[models]]\nname = 'mock'\nkind = 'upstream'\nlitellm_model = 'openai/gpt-4o-mini'\n"
        "litellm_params = { mock_response = 'hi' }\n"
        f"[[tenants]]\nname = 't'\napi_key_sha256 = ['{key_digest('sk-t')}']\n"))


def test_a_gateway_with_ray_workers_stopped_by_sigterm_exits_0_without_rays_crash_dump(tmp_path: Path):
    """Ray's failure-signal handler in the gateway process caught SIGTERM after the
    graceful stop: a `*** SIGTERM received` stack dump, and at times exit 134."""
    pytest.importorskip("ray", reason="ray is not installed")
    err = served_then_stopped_by_sigterm(tmp_path, (
        "[[models]]\nname = 'tiny'\nkind = 'local'\npath = 'tiny'\nnum_workers = 1\n"
        "[models.engine]\ntransport = 'ray'\nthreads_per_worker = 1\n"
        f"[[tenants]]\nname = 't'\napi_key_sha256 = ['{key_digest('sk-t')}']\n"))
    assert "SIGTERM received" not in err, err[-3000:]
