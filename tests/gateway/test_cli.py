import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from gateway.cli import build_parser, main
from gateway.config import key_digest
from tests.gateway.serving import free_port, wait_until_healthy

# where the tests' conftest points the gateway's files, so this served gateway keeps out of
# the user's data directory too
STORE_ENV = ("STEPAHEAD_TRACE_DB", "STEPAHEAD_PREDICTOR_DIR", "STEPAHEAD_RESPONSES_DB", "STEPAHEAD_SPENT_TOKENS")


def test_cli_has_serve_and_hash_key_subcommands():
    args = build_parser().parse_args(["serve", "--config", "x.toml", "--port", "9"])
    assert args.command == "serve" and args.port == 9 and args.config == "x.toml"
    assert main([]) == 2


def test_cli_version_is_the_installed_distributions(capsys, monkeypatch):
    import importlib.metadata
    import tomllib

    from gateway.version import installed_version

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    declared = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]["version"]
    assert capsys.readouterr().out.strip() == f"stepahead {declared}"

    def not_installed(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)   # run from a checkout never installed
    assert installed_version() == "unknown"


def test_hash_key_for_a_tenant_prints_a_table_the_config_loads(monkeypatch, capsys, tmp_path: Path):
    from gateway.auth import KeyRing
    from gateway.config import load_config

    config = tmp_path / "gw.toml"
    config.write_text("[[models]]\nname = 'm'\nkind = 'local'\npath = 'tiny'\n")
    assert main(["hash-key", "--generate", "--tenant", 'team "a"']) == 0
    out, err = capsys.readouterr()
    generated = err.strip().rsplit(": ", 1)[1]
    monkeypatch.setattr(sys, "stdin", __import__("io").StringIO("sk-given\n"))
    assert main(["hash-key", "--tenant", "b"]) == 0
    config.write_text(config.read_text() + out + capsys.readouterr().out)   # appended as the docs say
    loaded = load_config(config)
    assert [tenant.name for tenant in loaded.tenants] == ['team "a"', "b"]
    keys = KeyRing(loaded.tenants)
    assert keys.tenant_for_key(generated) == 'team "a"' and keys.tenant_for_key("sk-given") == "b"


def test_cli_hash_key_reads_stdin(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", __import__("io").StringIO("sk-abc\n"))
    assert main(["hash-key"]) == 0
    assert capsys.readouterr().out.strip() == key_digest("sk-abc")
    monkeypatch.setattr(sys, "stdin", __import__("io").StringIO("sk-abc\n\n  \n"))   # blank lines after it: one key
    assert main(["hash-key"]) == 0
    assert capsys.readouterr().out.strip() == key_digest("sk-abc")


def test_cli_hash_key_refuses_a_stdin_of_several_keys(monkeypatch, capsys):
    """QA145: `printf 'a\nb' | stepahead hash-key` printed the digest of "a" alone, exit 0."""
    monkeypatch.setattr(sys, "stdin", __import__("io").StringIO("sk-first\nsk-second\n"))
    assert main(["hash-key"]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.startswith("stepahead: stdin holds more than one line") \
        and len(out.err.splitlines()) == 1


def test_cli_serve_refuses_an_empty_config_path(capsys):
    """QA145: `serve --config "$CFG"` with CFG unset served the demo gateway (a new admin
    key, the default model) instead of the file meant."""
    assert main(["serve", "--config", "", "--model", "tiny"]) == 2
    assert capsys.readouterr().err.strip() == ("stepahead: bad config: --config is empty: give the config file's "
                                               "path (leave --config out to serve without one)")


def test_cli_serve_rejects_a_bad_config(tmp_path: Path, capsys):
    config = tmp_path / "bad.toml"
    config.write_text("[[models]]\nname = 'm'\nkind = 'cloud'\n")
    assert main(["serve", "--config", str(config)]) == 2
    assert "bad config" in capsys.readouterr().err


@pytest.mark.parametrize("start_method", ["auto", "spawn"])   # forked from the fork server, or spawned (QA73)
def test_serve_from_a_deleted_directory_fails_in_one_line_with_the_start_failure_status(tmp_path: Path, start_method):
    gone = tmp_path / "gone"
    config = tmp_path / "gw.toml"
    config.write_text('[[models]]\nname = "tiny"\nkind = "local"\npath = "tiny"\nnum_workers = 1\n'
                      f'[models.engine]\ntransport_options = {{ start_method = "{start_method}" }}\n'
                      '[[tenants]]\nname = "t"\napi_key_sha256 = "' + key_digest("sk-t") + '"\n')
    start = (f"mkdir {gone} && cd {gone} && rmdir {gone} && exec {sys.executable} -m gateway.cli serve "
             f"--config {config}")
    done = subprocess.run(["bash", "-c", start], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert done.returncode == 3, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1] == (
        "stepahead: the start failed: the current directory no longer exists (deleted after the shell entered it); "
        "start stepahead from one that does")
    assert "Traceback" not in done.stderr


def test_serve_flags_describe_the_no_config_model():
    from gateway.config import LocalModelConfig
    from gateway.serve_command import _no_config
    args = build_parser().parse_args(["serve", "--model", "/models/My-Model", "--workers", "3",
                                      "--policy", "predictive", "--hot-blocks", "512"])
    [model] = _no_config(args, "sk-x").models
    assert isinstance(model, LocalModelConfig)
    assert (model.name, model.path, model.num_workers) == ("My-Model", "/models/My-Model", 3)
    assert dict(model.engine_options) == {"policy": "predictive", "num_hot_blocks": 512}
    for anchor in ("ttl", "kvflow"):
        [model] = _no_config(build_parser().parse_args(["serve", "--policy", anchor]), "sk-x").models
        assert dict(model.engine_options) == {"policy": anchor}
    [model] = _no_config(build_parser().parse_args(["serve", "--host-blocks", "2048"]), "sk-x").models
    assert dict(model.engine_options) == {"num_host_blocks": 2048}   # QA44: the host tier had no flag
    [default] = _no_config(build_parser().parse_args(["serve"]), "sk-x").models
    assert (default.name, default.path, default.num_workers, default.engine_options) == ("smollm2", "smollm2", 2, ())


def test_serve_refuses_model_flags_next_to_a_config(tmp_path: Path, capsys):
    assert main(["serve", "--config", str(tmp_path / "x.toml"), "--policy", "predictive"]) == 2
    assert "--policy applies only without --config" in capsys.readouterr().err
    assert main(["serve", "--workers", "0"]) == 2
    assert main(["serve", "--hot-blocks", "0"]) == 2
    assert main(["serve", "--host-blocks", "-1"]) == 2
    with pytest.raises(SystemExit):
        main(["serve", "--policy", "fifo"])


def test_serve_device_and_dtype_flags_reach_the_engine_options():
    from gateway.serve_command import _no_config
    args = build_parser().parse_args(["serve", "--model", "tiny", "--device", "cuda:1", "--dtype", "bfloat16"])
    [model] = _no_config(args, "sk-x").models
    assert dict(model.engine_options) == {"device": "cuda:1", "dtype": "bfloat16"}


def test_serve_refuses_an_unusable_device_or_model_before_binding(monkeypatch, capsys):
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["serve", "--model", "tiny", "--device", "cuda"]) == 2
    assert "cannot serve model 'tiny': device 'cuda' was asked for, but torch sees no CUDA GPU" in capsys.readouterr().err
    assert main(["serve", "--model", "tiny", "--device", "tpu"]) == 2
    assert "not a torch device name" in capsys.readouterr().err
    assert main(["serve", "--model", "tiny", "--dtype", "int4"]) == 2
    assert "dtype 'int4' is not supported" in capsys.readouterr().err
    assert main(["serve", "--model", "/no/such/model"]) == 2
    assert "neither 'smollm2', 'tiny' nor a local model directory" in capsys.readouterr().err


@pytest.mark.parametrize("line, message", [
    ("decode_batch = 0", "engine option decode_batch must be an integer >= 1, not 0"),
    ("num_hot_blocks = 'many'", "engine option num_hot_blocks must be an integer >= 1, not 'many'"),
    ("prefix_caching = 'no'", "engine option prefix_caching must be true or false"),
    ("routing = 'random'", "engine option routing must be one of prefix, least_loaded, round_robin"),
    ("decode_bath = 4", "unknown engine option 'decode_bath'; known: block_size, decode_batch,"),
    ("transport_options = { start_method = 'fork' }",
     "transport option start_method must be one of auto, forkserver, spawn, not 'fork'"),
])
def test_serve_refuses_a_bad_engine_option_before_binding(tmp_path: Path, capsys, line, message):
    config = tmp_path / "engine.toml"
    config.write_text("[[models]]\nname = 'tiny'\nkind = 'local'\npath = 'tiny'\n"
                      f"[models.engine]\n{line}\n"
                      "[[tenants]]\nname = 't'\napi_key_sha256 = ['" + "0" * 64 + "']\n")
    assert main(["serve", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert f"cannot serve model 'tiny': {message}" in err and "Traceback" not in err


@pytest.mark.parametrize("engine, needs", [
    ("", True),                                                    # CPU workers fork by default
    ("transport_options = { start_method = 'spawn' }", False),
    ("device = 'cuda'", False),                                    # GPU workers are spawned
    ("device = 'cuda'\ntransport_options = { start_method = 'forkserver' }", True),
    ("transport = 'ray'", False),
])
def test_serve_starts_the_fork_server_early_only_for_workers_forked_from_it(tmp_path: Path, engine, needs):
    from gateway.config import load_config
    from gateway.serve_command import needs_fork_server

    config = tmp_path / "gw.toml"
    config.write_text("[[models]]\nname = 'up'\nkind = 'upstream'\nlitellm_model = 'openai/x'\n"
                      f"[[models]]\nname = 'm'\nkind = 'local'\npath = 'tiny'\n[models.engine]\n{engine}\n"
                      "[[tenants]]\nname = 't'\napi_key_sha256 = ['" + "0" * 64 + "']\n")
    assert needs_fork_server(load_config(config)) is needs


def test_serve_refuses_an_embedding_model_directory_that_is_not_there(tmp_path: Path, capsys):
    config = tmp_path / "embedding.toml"
    config.write_text(f"[[models]]\nname = 'enc'\nkind = 'embedding'\npath = '{tmp_path / 'missing'}'\n"
                      "[[tenants]]\nname = 't'\napi_key_sha256 = ['" + "0" * 64 + "']\n")
    assert main(["serve", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "cannot serve model 'enc':" in err and "no config.json" in err and "Traceback" not in err


def test_serve_hands_uvicorn_the_configured_keep_alive_and_shutdown_timeout(monkeypatch, tmp_path: Path):
    import uvicorn
    seen = {}

    def run(server, sockets=None) -> None:
        seen.update(timeout_keep_alive=server.config.timeout_keep_alive, port=server.config.port,
                    timeout_graceful_shutdown=server.config.timeout_graceful_shutdown)
        server.started = True

    monkeypatch.setattr(uvicorn.Server, "run", run)
    assert main(["serve", "--model", "tiny", "--port", "8765"]) == 0
    assert seen["timeout_keep_alive"] == 75.0 and seen["port"] == 8765
    assert seen["timeout_graceful_shutdown"] is None   # by default every request in flight may finish
    config = tmp_path / "gw.toml"
    config.write_text("[server]\nkeep_alive_s = 12\nshutdown_timeout_s = 25\n[[models]]\nname = 'm'\nkind = 'local'\npath = 'tiny'\n"
                      "[[tenants]]\nname = 't'\napi_key_sha256 = ['" + "0" * 64 + "']\n")
    # --port as well: the default 8000 may be taken on a developer's machine.
    assert main(["serve", "--config", str(config), "--port", "8765"]) == 0
    assert seen["timeout_keep_alive"] == 12.0 and seen["timeout_graceful_shutdown"] == 25.0


def test_serve_refuses_an_address_it_cannot_listen_on_before_loading_anything(capsys):
    import socket
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", "--model", "tiny", "--port", str(port)]) == 2
        assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in capsys.readouterr().err
    assert main(["serve", "--model", "tiny", "--host", "192.0.2.1"]) == 2   # TEST-NET-1: not this machine's
    assert "cannot listen on 192.0.2.1:8000: Cannot assign requested address" in capsys.readouterr().err


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


def test_serve_with_config_answers_requests_and_a_forced_stop_with_requests_in_flight_logs_one_line_each_and_no_traceback(
        tmp_path: Path, fake_upstream):
    """`serve --config FILE --port N` says where it serves and answers requests (one
    gateway started for both checks). A second Ctrl+C stops the gateway at once: the
    requests still running (one streamed, one not, both waiting on a silent upstream) are
    cut, each reported in one line, and so is the shutdown it cut short, instead of a
    traceback each (the lines are errors: `--log-level warning` keeps them)."""
    import threading

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
        time.sleep(1.0)
        process.send_signal(signal.SIGINT)
        time.sleep(0.5)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
        for client in clients:
            client.join(30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    assert err.count("stepahead: a request in flight was cut: the stop was forced") == 2, err[-3000:]
    assert len(answers) == 2


def test_host_port_and_capture_content_on_the_command_line_win_over_the_file():
    from gateway.config import parse_config
    from gateway.serve_command import with_command_line_overrides

    config = parse_config({"server": {"host": "0.0.0.0", "port": 8000}, "tracing": {"capture_content": False},
                           "models": [{"name": "m", "kind": "local", "path": "tiny"}],
                           "tenants": [{"name": "t", "api_key_sha256": ["0" * 64]}]})
    args = build_parser().parse_args(["serve", "--config", "x.toml", "--port", "9", "--capture-content"])
    overridden = with_command_line_overrides(config, args)
    assert (overridden.host, overridden.port, overridden.tracing.capture_content) == ("0.0.0.0", 9, True)
    unchanged = with_command_line_overrides(config, build_parser().parse_args(["serve", "--config", "x.toml"]))
    assert unchanged == config   # nothing given: the file's values stand, capture_content False included


@pytest.mark.parametrize("flags", [["--port", "70000"], ["--port", "-1"], ["--config", "FILE", "--port", "70000"]])
def test_serve_refuses_a_port_out_of_range_on_the_command_line_as_a_bad_config(tmp_path: Path, capsys, flags):
    config = tmp_path / "gw.toml"
    config.write_text("[[models]]\nname = 'm'\nkind = 'local'\npath = 'tiny'\n"
                      "[[tenants]]\nname = 't'\napi_key_sha256 = ['" + "0" * 64 + "']\n")
    flags = [str(config) if flag == "FILE" else flag for flag in flags]
    extra = [] if "--config" in flags else ["--model", "tiny"]
    assert main(["serve", *extra, *flags]) == 2
    port = flags[flags.index("--port") + 1]
    assert capsys.readouterr().err == f"stepahead: bad config: server.port must be in [0, 65535], got {port}\n"


def _served_then_stopped_by_sigterm(tmp_path: Path, config_text: str) -> str:
    """Run `stepahead serve --port 0` on `config_text` until it answers /health, stop it by
    SIGTERM, check that it said where it served (the port the system gave, not 0) and
    exited 0 after uvicorn's shutdown, without a traceback; its stderr."""
    config = tmp_path / "gw.toml"
    config.write_text(config_text)
    process = subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "serve", "--config", str(config), "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={"LITELLM_LOCAL_MODEL_COST_MAP": "True", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
             "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
             **{name: str(tmp_path / name) for name in STORE_ENV}})
    try:
        first_line = process.stdout.readline()
        assert first_line.startswith("stepahead: serving on http://127.0.0.1:"), first_line
        url = first_line.split()[-1]
        assert not url.endswith(":0/v1")
        assert httpx.get(url.removesuffix("/v1") + "/health", timeout=10).status_code == 200   # ready once said
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=90)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err[-3000:]
    assert "Application shutdown complete" in err and "Traceback" not in err
    return err


def test_serve_announces_the_port_it_listens_on_once_started_and_a_sigterm_stop_exits_0(tmp_path: Path):
    """`--port 0`: the port the system gave, not 0, printed once the gateway answers; a
    clean stop by SIGTERM is a success, as one by Ctrl+C is (uvicorn raises the signal
    again once stopped, and SIGTERM's default action would end the process by it)."""
    _served_then_stopped_by_sigterm(tmp_path, (
        "[[models]]\nname = 'mock'\nkind = 'upstream'\nlitellm_model = 'openai/gpt-4o-mini'\n"
        "litellm_params = { mock_response = 'hi' }\n"
        f"[[tenants]]\nname = 't'\napi_key_sha256 = ['{key_digest('sk-t')}']\n"))


def test_a_gateway_with_ray_workers_stopped_by_sigterm_exits_0_without_rays_crash_dump(tmp_path: Path):
    """Ray's failure-signal handler in the gateway process caught SIGTERM after the
    graceful stop: a `*** SIGTERM received` stack dump, and at times exit 134."""
    pytest.importorskip("ray", reason="ray is not installed")
    err = _served_then_stopped_by_sigterm(tmp_path, (
        "[[models]]\nname = 'tiny'\nkind = 'local'\npath = 'tiny'\nnum_workers = 1\n"
        "[models.engine]\ntransport = 'ray'\nthreads_per_worker = 1\n"
        f"[[tenants]]\nname = 't'\napi_key_sha256 = ['{key_digest('sk-t')}']\n"))
    assert "SIGTERM received" not in err, err[-3000:]
