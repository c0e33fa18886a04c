"""`stepahead serve`: run the gateway under uvicorn.

With no `--config`, serves one local model (`--model`: the embedded default, the tiny
test model or a local Hugging Face directory) on `--workers` workers with the `--policy`
KV policy for one demo tenant, and prints the base URL and the demo key (from
$STEPAHEAD_DEMO_KEY, or a fresh random one). Command-line `--host`/`--port` win over the
file's [server] table, and `--capture-content` over its [tracing] table; the model flags
describe the no-config model only, so they are refused next to `--config` (the file says
all of that). Without `--config`, $STEPAHEAD_CONFIG names the file, as it does for
`uvicorn --factory gateway.app:build_app` (said in a line). The standard variables the
tracer reads are config too: an OTLP protocol it cannot send
($OTEL_EXPORTER_OTLP_PROTOCOL=http/json) is a bad config, found before anything starts.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import sys

from agents_trace.config import TraceConfigError
from cache.policies import POLICY_NAMES as POLICIES
from gateway.access_log import redact_access_log
from gateway.hangups_at_exit import HangupsWhileExiting, say_hangup_ignored
from gateway.listen_address import address_problem, base_url
from gateway.log_lines import shown_log_lines
from gateway.config import (DEFAULT_LOCAL_MODEL, DEFAULT_LOCAL_POLICY, ConfigError, default_config, demo_key_from,
                            load_config)
from gateway.uvicorn_server import start_aware_server_class

CONFIG_ENV = "STEPAHEAD_CONFIG"   # the config file when --config gives none (gateway/app.py reads it too)
NO_CONFIG_FLAGS = ("model", "workers", "policy", "hot_blocks", "host_blocks", "device", "dtype")  # argparse dests


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("serve", help="run the OpenAI-compatible HTTP gateway")
    parser.add_argument("--config", help="TOML config file (models, tenants, limits, tracing; default "
                        f"${CONFIG_ENV} when set); SIGHUP reloads its tenants while serving")
    parser.add_argument("--host", help="bind address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port (default 8000; 0: a free port, printed once it listens)")
    parser.add_argument("--log-level", default="info",
                        choices=("critical", "error", "warning", "info", "debug"),
                        help="least severe of the log lines printed, uvicorn's and the gateway's (default "
                             "info; 'warning': no INFO: lines)")
    parser.add_argument("--capture-content", action="store_true", default=None,
                        help="keep prompts and replies in the traces (/ui, `stepahead traces show "
                             "--content`, OTLP spans); off unless [tracing] capture_content or "
                             "$OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT says so")
    local = parser.add_argument_group("without --config")
    local.add_argument("--model", help=f"'{DEFAULT_LOCAL_MODEL}' (default), 'tiny', or a local "
                                       "Hugging Face model directory")
    local.add_argument("--workers", type=int, help="local worker processes (default 2)")
    local.add_argument("--policy", choices=POLICIES, help=f"KV cache policy (default {DEFAULT_LOCAL_POLICY})")
    local.add_argument("--hot-blocks", type=int, help="hot KV blocks per worker (default 4096)")
    local.add_argument("--host-blocks", type=int, help="host-tier KV blocks per worker, where the policy demotes "
                                                       "blocks instead of dropping them (default 0: no host tier)")
    local.add_argument("--device", help="where workers run the model: 'cpu' (default), 'cuda' or 'cuda:N'")
    local.add_argument("--dtype", help="weights and KV cache: 'auto' (default: bfloat16 where the device "
                                       "computes it natively, else float32), 'float32', 'bfloat16' or 'float16'")
    parser.set_defaults(handler=serve)


def _no_config(args: argparse.Namespace, demo_key: str):
    """The one-model config the no-config flags describe (unset flags: its defaults)."""
    engine = {key: value for key, value in (("policy", args.policy), ("num_hot_blocks", args.hot_blocks),
                                            ("num_host_blocks", args.host_blocks),
                                            ("device", args.device), ("dtype", args.dtype))
              if value is not None}
    if args.hot_blocks is not None and args.hot_blocks < 1:
        raise ConfigError("--hot-blocks must be >= 1")
    if args.host_blocks is not None and args.host_blocks < 0:
        raise ConfigError("--host-blocks must be >= 0")
    sizing = {} if args.workers is None else {"num_workers": args.workers}
    return default_config(demo_key, model=args.model or DEFAULT_LOCAL_MODEL, engine_options=engine, **sizing)


EMPTY_CONFIG_PATH = "--config is empty: give the config file's path (leave --config out to serve without one)"


def config_file_of(args: argparse.Namespace, environ) -> str | None:
    """The config file to serve: `--config`, else $STEPAHEAD_CONFIG (unset or empty: none).
    An empty `--config` (`--config "$CFG"` with the variable unset) is a ConfigError, not
    the demo gateway served instead of the file meant."""
    if args.config is not None and not args.config.strip():
        raise ConfigError(EMPTY_CONFIG_PATH)
    return args.config or environ.get(CONFIG_ENV) or None


def _no_config_flags_given(args: argparse.Namespace) -> list[str]:
    return [f"--{dest.replace('_', '-')}" for dest in NO_CONFIG_FLAGS if getattr(args, dest) is not None]


def _process_device(engine_options: dict) -> str | None:
    """The device a local model's workers run on when they are processes of this
    machine (the engine's defaults: local transport, CPU); None when they are Ray actors."""
    if engine_options.get("transport", "local") != "local":
        return None
    return str(engine_options.get("device", "cpu"))


def local_model_problem(config) -> str | None:
    """Why a local model of `config` cannot start here (a bad engine option, missing
    model, unusable device), found before the server binds; None when all can. An
    engine option the engine does not have is a `bad config:` line naming
    `models[i].engine`, with the nearest known option, as a typo in any other table is."""
    from gateway.config import LocalModelConfig
    from gateway.embedding_model import EmbeddingModelConfig
    from gateway.local_embeddings import EmbeddingModelError, check_embedding_model
    from gateway.model_backends import engine_options_run, num_local_workers
    from agents_trace.config import unknown_key_problem
    from shards.engine_options import EngineOptionError, UnknownEngineOptionError
    from shards.model_files import ModelLoadError, check_model

    for index, model in enumerate(config.models):
        if isinstance(model, EmbeddingModelConfig):
            try:
                check_embedding_model(model.path)
            except EmbeddingModelError as exc:
                return f"cannot serve model {model.name!r}: {exc}"
        if not isinstance(model, LocalModelConfig):
            continue
        try:
            options = engine_options_run(model, num_local_workers(config))   # as `LocalBackend` runs them
            check_model(model.path, _process_device(options), str(options.get("dtype", "auto")))
        except UnknownEngineOptionError as exc:   # a typo, worded as every other table's (QA192 F3)
            return f"bad config: {unknown_key_problem({exc.name: None}, exc.known, f'models[{index}].engine')}"
        except (EngineOptionError, ModelLoadError) as exc:
            return f"cannot serve model {model.name!r}: {exc}"
    return None


def with_command_line_overrides(config, args: argparse.Namespace):
    """`config` with what the command line sets over any file: `--host`, `--port`,
    `--capture-content`."""
    overrides = {k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None}
    if args.capture_content:
        overrides["tracing"] = dataclasses.replace(config.tracing, capture_content=True)
    return dataclasses.replace(config, **overrides)


def needs_fork_server(config) -> bool:
    """Whether some local model of `config` forks its workers from the fork server (on
    the CPU, unless its `transport_options.start_method` says "spawn")."""
    from gateway.config import LocalModelConfig
    from shards.local_transport import forks_from_server

    for model in config.models:
        if not isinstance(model, LocalModelConfig):
            continue
        options = dict(model.engine_options)
        device = _process_device(options)
        start_method = dict(options.get("transport_options") or {}).get("start_method", "auto")
        if device is not None and forks_from_server(device, str(start_method)):
            return True
    return False


def _has_local_model(config) -> bool:
    from gateway.config import LocalModelConfig

    return any(isinstance(model, LocalModelConfig) for model in config.models)


def _working_directory_gone() -> bool:
    """Whether the current directory was deleted (said in one line): multiprocessing
    cannot start a local model's workers from there (the fork server, or a spawned child)."""
    try:
        os.getcwd()
    except FileNotFoundError:
        print("stepahead: the start failed: the current directory no longer exists (deleted after the shell "
              "entered it); start stepahead from one that does", file=sys.stderr)
        return True
    return False


STARTUP_FAILURE = 3   # uvicorn's exit status when the application did not start


def serve(args: argparse.Namespace) -> int:
    """Serve until stopped; the exit status: 0 once served (then stopped by Ctrl+C or
    SIGTERM), 2 for a bad config, flag or address, 3 when the start failed, 128 + the
    signal when Ctrl+C (or SIGTERM) stopped the start. Ctrl+C at any point ends with a
    line, never a traceback. A SIGHUP never ends it (under the `stepahead` command, from
    `main`'s first step: ignored until here, gateway/cli.py): before the app can serve it
    (or while it stops) it is counted; the app reloads the tenants of --config's file, or,
    without one, says there is nothing to reload. Once the app stopped, each is said to
    be ignored (those counted while it stopped too). Where `serve` is the process's last
    step (`args.exits_after`: the `stepahead` command's own, gateway/cli.py), SIGHUP then
    stays ignored, not put back, until the process exits (QA64: the exit takes a second or
    more); in a process that goes on (`main([...])`: a test, an embedder), the SIGHUP
    handler `serve` found is put back as it returns."""
    from gateway.reload import HangupsBeforeStart

    found = signal.getsignal(signal.SIGHUP)   # (None: not set from Python; the default stands for it)
    counted = HangupsBeforeStart.install()
    if counted is None:
        return _serve(args)
    try:
        return _serve(args)
    finally:
        if getattr(args, "exits_after", False):
            HangupsWhileExiting().install()
        else:
            signal.signal(signal.SIGHUP, signal.SIG_DFL if found is None else found)
        for _ in range(counted.num_seen):   # final now: those since the app's handler went (or it never came)
            say_hangup_ignored()


def _serve(args: argparse.Namespace) -> int:
    # the product's log lines (gateway/log_lines.py) from before the app is built (QA199 F3): uvicorn.Config's
    # logging set-up (dictConfig, disable_existing_loggers off) leaves the handler in place
    with shown_log_lines(args.log_level, lasting=getattr(args, "exits_after", False)):
        return _serve_logged(args)


def _serve_logged(args: argparse.Namespace) -> int:
    try:
        server = _server_or_exit_status(args)
    except KeyboardInterrupt:   # Ctrl+C before the server runs: nothing has started yet
        print("stepahead: stopped", file=sys.stderr, flush=True)
        return 128 + signal.SIGINT
    if isinstance(server, int):
        return server
    interrupted = False
    try:
        server.run()
    except KeyboardInterrupt:   # uvicorn raises the signal it stopped for again once stopped;
        interrupted = True      # or a Ctrl+C came before uvicorn took the signals over
    if server.started and server.start_cancelled_by is None:   # served (a signal while it bound: never said so)
        return 0
    stopped_by = server.start_cancelled_by or (signal.SIGINT if interrupted else None)
    if stopped_by is not None:
        print("stepahead: stopped", file=sys.stderr, flush=True)
        return 128 + stopped_by
    return STARTUP_FAILURE


def _server_or_exit_status(args: argparse.Namespace):
    """The server for `args`, ready to run, or the exit status of why there is none."""
    import uvicorn

    from agents_trace.otel_setup import otlp_target
    from gateway.app import build_app
    from gateway.stopping import begin_stop
    from gateway.http_protocol import uvicorn_protocols

    demo_key = None
    try:
        config_path = config_file_of(args, os.environ)
        if config_path:
            given = _no_config_flags_given(args)
            if given:
                one = len(given) == 1
                raise ConfigError(f"{', '.join(given)} {'applies' if one else 'apply'} only without --config; "
                                  f"set {'it' if one else 'them'} in the file's [[models]] / [models.engine] tables"
                                  + ("" if args.config else f" (${CONFIG_ENV} names {config_path}: unset it to "
                                                            "serve without a config file)"))
            if not args.config:   # said, as a gateway other than the demo one starts
                print(f"stepahead: the config file is ${CONFIG_ENV}'s: {config_path}", file=sys.stderr, flush=True)
            config = load_config(config_path)
        else:
            demo_key = demo_key_from(os.environ)
            config = _no_config(args, demo_key)
        config = with_command_line_overrides(config, args)   # checked too: `--port 70000` is a bad config
        if config.tracing.enabled:   # and the OTEL_* variables the tracer reads: an unknown protocol
            otlp_target(config.tracing)
    except (ConfigError, TraceConfigError, OSError) as exc:
        print(f"stepahead: bad config: {exc}", file=sys.stderr)
        return 2
    fork_server_started = needs_fork_server(config)
    if _has_local_model(config) and _working_directory_gone():   # a worker's start (forked or spawned) reads it
        return 3
    if fork_server_started:   # it imports torch and the workers' code while this process loads
        from shards.local_transport import start_fork_server

        start_fork_server()
    problem = local_model_problem(config)
    if problem:
        print(f"stepahead: {problem}", file=sys.stderr)
        return 2
    problem = address_problem(config.host, config.port)
    if problem:   # found before the workers load the model, not after
        print(f"stepahead: {problem}", file=sys.stderr)
        return 2
    app = build_app(config, config_path=config_path,
                    overrides=lambda reloaded: with_command_line_overrides(reloaded, args))

    def announce(port: int) -> None:   # listening, the start done: the port bound, `--port 0`'s too
        print(f"stepahead: serving on {base_url(config.host, port)}", flush=True)
        if demo_key is not None:
            print(f"stepahead: demo tenant API key: {demo_key}", flush=True)

    def cancel_start() -> None:
        app.state.gateway.cancel_start()
        if fork_server_started:   # still importing, every fork waits on it: it goes with the start
            from shards.local_transport import stop_fork_server_if_idle

            stop_fork_server_if_idle()

    server_config = uvicorn.Config(app, host=config.host, port=config.port, log_level=args.log_level,
                                   **uvicorn_protocols(), timeout_keep_alive=config.keep_alive_s,
                                   timeout_graceful_shutdown=config.shutdown_timeout_s)
    redact_access_log()   # after uvicorn's logging set-up
    return start_aware_server_class(cancel_start, announce, lambda: begin_stop(app.state.gateway))(server_config)
