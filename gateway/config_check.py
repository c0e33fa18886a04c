"""`stepahead config check FILE`: whether `stepahead serve --config FILE` would start, asked
before the file is installed (and a running gateway sent SIGHUP).

Invariant: the file is checked as the start checks it and by the same functions
(`load_config`, then the OTLP settings' `otlp_target`, `local_model_problem`, the engine
options and model files checked without loading a model, the stores' places
`check_store_places`, and the address `address_error`), in this process's environment (a
tenant's `api_key_env` must be set here too); no model is loaded, no worker started, and
the address is bound only to be let go at once. The stores' places are tried as the start
tries them, with its effects on disk but one: their directories made (0700), their
SQLite files opened (made when missing), a probe file written and removed; a damaged
SQLite file is never set aside here (QA179 F2: the check renamed one, and a gateway
running on it went on writing into the renamed file). Each problem is said in the
start's words, one `stepahead: ...` line each on stderr, exit status 2: a file that does
not load is one line (`load_config` stops at the first problem found); once it loads,
the later checks each add theirs (the models' check stops at its first model that cannot
start). A file that loads and would start prints `FILE: ok` and a one-line summary, exit
status 0. What the start only warns of is a `stepahead: warning: ...` line on stderr and
fails nothing: an upstream model's unset `api_key_env`/`api_base_env` variable, tenants'
names that differ only in letter case (`case_twin_warnings`: the check's own), tenants'
kv_share ignored under a local model's policy (`with_tenant_shares`), an address in use
now (a gateway serving it, to be restarted with this file, holds it), and each store
SQLite finds damaged (the trace store, the responses', the conversations', the Files and
Batch APIs' indexes), saying what the gateway will do with it (`store_places`).
Not checked: whether the KV cache's tiers fit in memory (known only once a worker
allocates them). `--json` prints one JSON object instead, `{"ok", "file", "errors",
"warnings", "summary"}`, the summary null when the file did not load.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from errno import EADDRINUSE
from typing import Any

from agents_trace.config import TraceConfigError
from gateway.config import ConfigError, GatewayConfig, LocalModelConfig, UpstreamModelConfig, load_config
from gateway.tenant_config import case_twin_warnings

BAD_CONFIG = "bad config: "   # the start's prefix (after "stepahead: ") of a file that does not load
WARNING = "warning: "   # after "stepahead: ", what fails nothing: told apart from the errors' lines (QA199 F7)


@dataclass(frozen=True, slots=True)
class ConfigCheck:
    """What checking one file found: `errors` in the start's words (without its
    "stepahead: " prefix), empty when it would start; `warnings` what the start would only
    warn of (never a failure); `summary` None when it did not load."""

    file: str
    errors: tuple[str, ...]
    summary: dict[str, Any] | None
    warnings: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.errors

    def as_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "file": self.file, "errors": list(self.errors), "warnings": list(self.warnings),
                "summary": self.summary}


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("config", help="check a gateway config file")
    commands = parser.add_subparsers(dest="config_command", metavar="COMMAND", required=True)
    check = commands.add_parser(
        "check", help="check a config file as `serve --config` would, without serving it",
        description="Load and check a gateway config file as `stepahead serve --config FILE` does at its "
                    "start (its environment variables read here; engine options, model files, the stores' "
                    "places and the address checked; no model loaded, no worker started; whether the KV "
                    "cache fits in memory is not checked). Exit status 0 when it would start (warnings "
                    "on stderr), 2 with each problem on stderr otherwise.")
    check.add_argument("file", metavar="FILE", help="the TOML config file")
    check.add_argument("--json", action="store_true",
                       help='print one JSON object: {"ok", "file", "errors", "warnings", "summary"}')
    check.set_defaults(handler=check_command)


def check_config_file(path: str, environ: Mapping[str, str] = os.environ) -> ConfigCheck:
    """Check the config file at `path` as the start of `serve --config path` does."""
    from agents_trace.otel_setup import otlp_target
    from gateway.serve_command import EMPTY_CONFIG_PATH, local_model_problem

    if not path.strip():   # the start's line for `--config ""` (serve_command `config_file_of`)
        return ConfigCheck(path, (f"{BAD_CONFIG}{EMPTY_CONFIG_PATH}",), None)
    try:
        config = load_config(path)
    except (ConfigError, TraceConfigError, OSError) as exc:   # as `serve` catches them
        return ConfigCheck(path, (f"{BAD_CONFIG}{exc}",), None)
    errors = []
    if config.tracing.enabled:
        try:
            otlp_target(config.tracing, environ)
        except TraceConfigError as exc:
            errors.append(f"{BAD_CONFIG}{exc}")
    problem = local_model_problem(config)
    if problem:
        errors.append(problem)
    warnings = case_twin_warnings(tenant.name for tenant in config.tenants)
    warnings.extend([] if problem else tenant_share_warnings(config))
    damaged: list[str] = []
    errors.extend(store_places_problems(config, environ, damaged))
    address, address_warnings = address_problems(config)
    errors.extend(address)
    warnings.extend(address_warnings)
    warnings.extend(damaged)
    warnings.extend(f"model {model.name!r}: {warning}" for model in config.models
                    if isinstance(model, UpstreamModelConfig)
                    for warning in [model.missing_variables_warning()] if warning)
    return ConfigCheck(path, tuple(errors), config_summary(config), tuple(warnings))


def tenant_share_warnings(config: GatewayConfig) -> list[str]:
    """The start's warnings about the tenants' shares on its local models (a kv_share
    ignored under a policy without reservations), made by the function the start makes
    them with (`with_tenant_shares`, which `LocalBackend` logs), on each model's engine
    options as the start runs them. Only once `local_model_problem` found none (a bad
    option raises here as there)."""
    from gateway.model_backends import engine_options_run, num_local_workers
    from gateway.tenant_shares import with_tenant_shares

    weights = {tenant.name: tenant.weight for tenant in config.tenants}
    kv_shares = {tenant.name: tenant.kv_share for tenant in config.tenants}
    workers = num_local_workers(config)
    return [note for model in config.models if isinstance(model, LocalModelConfig)
            for note in with_tenant_shares(engine_options_run(model, workers), weights, kv_shares, model.name)[1]]


def store_places_problems(config: GatewayConfig, environ: Mapping[str, str],
                          damaged: list[str] | None = None) -> list[str]:
    """The start's `check_store_places` failure (`store_places_failure`) as the check's
    error, or none."""
    failure = store_places_failure(config, environ, damaged)
    return [] if failure is None else [f"the start would fail: {failure}"]


def store_places_failure(config: GatewayConfig, environ: Mapping[str, str] = os.environ,
                         damaged: list[str] | None = None) -> str | None:
    """The start's `check_store_places` failure (all the places it names, in one line), or
    None; tried as the start tries them (the module docstring), but that no SQLite file is
    set aside: `damaged` gains a line for each one SQLite finds damaged. A reload asks it
    too (gateway/reload.py: it refuses a file the next start would refuse). Blocking."""
    from gateway.start_failure import StartFailed
    from gateway.store_places import check_store_places

    try:
        check_store_places(config, environ, [] if damaged is None else damaged)
    except StartFailed as exc:
        return str(exc)
    return None


def address_problems(config: GatewayConfig) -> tuple[list[str], list[str]]:
    """(errors, warnings) of binding the file's `[server]` address as the start does: one
    that cannot be bound is an error; one in use now only a warning, as the file is often
    checked while the gateway it will restart holds that address."""
    from gateway.listen_address import address_error, cannot_listen

    error = address_error(config.host, config.port)
    if error is None:
        return [], []
    if error.errno == EADDRINUSE:
        return [], [f"{cannot_listen(config.host, config.port, error)} now: the start fails while something "
                    "holds it (a gateway serving there must stop first)"]
    return [cannot_listen(config.host, config.port, error)], []


def config_summary(config: GatewayConfig) -> dict[str, Any]:
    """The models (name, kind, local workers), the tenants' names and the local workers in all."""
    models = [{"name": model.name, "kind": model.kind,
               **({"workers": model.num_workers} if isinstance(model, LocalModelConfig) else {})}
              for model in config.models]
    return {"models": models, "tenants": [tenant.name for tenant in config.tenants],
            "workers": sum(model.get("workers", 0) for model in models)}


def summary_line(summary: dict[str, Any]) -> str:
    """`summary` in one line: names escaped where they would not print (gateway/reload.py)."""
    from gateway.reload import shown

    def model_text(model: dict[str, Any]) -> str:
        workers = model.get("workers")
        sizing = "" if workers is None else f", {workers} worker{'s' * (workers != 1)}"
        return f"{shown(model['name'])} ({model['kind']}{sizing})"

    models, tenants = summary["models"], summary["tenants"]
    return (f"{len(models)} model{'s' * (len(models) != 1)}: {', '.join(map(model_text, models))}; "
            f"{len(tenants)} tenant{'s' * (len(tenants) != 1)}: {', '.join(map(shown, tenants))}; "
            f"{summary['workers']} local worker{'s' * (summary['workers'] != 1)}")


def check_command(args: argparse.Namespace) -> int:
    result = check_config_file(args.file)
    if args.json:
        print(json.dumps(result.as_json()))
        return 0 if result.ok else 2
    for warning in result.warnings:
        print(f"stepahead: {WARNING}{warning}", file=sys.stderr)
    if result.ok:
        print(f"{args.file}: ok")
        print(summary_line(result.summary))
    else:
        for error in result.errors:
            print(f"stepahead: {error}", file=sys.stderr)
    return 0 if result.ok else 2
