"""The `stepahead` command line: its subcommands, and `serve`'s checks of its arguments and
config before it binds or loads anything (a served gateway stopped: test_cli_stops.py)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.cli import build_parser, main
from gateway.config import key_digest
from tests.gateway.serving import free_port

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
    port = free_port()   # the start checks that it can listen there: a fixed port may be taken
    assert main(["serve", "--model", "tiny", "--port", str(port)]) == 0
    assert seen["timeout_keep_alive"] == 75.0 and seen["port"] == port
    assert seen["timeout_graceful_shutdown"] is None   # by default every request in flight may finish
    config = tmp_path / "gw.toml"
    config.write_text("[server]\nkeep_alive_s = 12\nshutdown_timeout_s = 25\n[[models]]\nname = 'm'\nkind = 'local'\npath = 'tiny'\n"
                      "[[tenants]]\nname = 't'\napi_key_sha256 = ['" + "0" * 64 + "']\n")
    # --port as well: the default 8000 may be taken on a developer's machine.
    assert main(["serve", "--config", str(config), "--port", str(free_port())]) == 0
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
