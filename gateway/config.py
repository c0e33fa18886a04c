"""Gateway configuration: models, tenants, limits, tracing, read from TOML.

Invariants: every record is frozen; API keys only ever exist here as sha256 hex digests
(a key read from an environment variable is hashed at load time and the plaintext dropped:
the tenants' part is gateway/tenant_config.py); model and tenant names are unique; a
limit of None means "unlimited", never 0 or -1 (`file_bytes_per_tenant` 0 refuses every
upload, as a `token_budget` of 0 refuses every request).
`default_config(demo_key)` is what `stepahead serve` runs with no file: the embedded
default model on two local workers and one demo tenant.
"""
from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from collections import Counter
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from agents_trace.config import TraceConfig, TraceConfigError, data_file, parse_trace_config

from gateway.conversation_bytes import DEFAULT_CONVERSATION_BYTES_PER_TENANT
from gateway.config_values import ConfigError, positive, reject_unknown_keys, take, table_at, tables_at
from gateway.file_quota import DEFAULT_FILE_BYTES_PER_TENANT
from gateway.model_configs import (DEFAULT_LOCAL_MODEL, LocalModelConfig, ModelConfig,  # noqa: F401 (re-exported)
                                   UpstreamModelConfig, engine_tenants_problem, model_config)
from gateway.tenant_config import (UNAUTHENTICATED, LimitsConfig, TenantConfig,  # noqa: F401 (re-exported)
                                   demo_key_from, key_digest, parse_tenant, tenant_name_problem,
                                   unserved_tenant_model)

# The KV policy of a local model whose [models.engine] names none. NOTE: the engine's own
# default stays "lru": only the gateway runs the predictor whose forecasts drive this one,
# and a tenant without a trusted forecast is ranked exactly as LRU ranks it.
DEFAULT_LOCAL_POLICY = "predictive"
BUILTIN_LOCAL_MODELS = ("smollm2", "tiny")
DEFAULT_KEEP_ALIVE_S = 75.0
DEFAULT_BODY_TIMEOUT_S = 60.0
RESPONSES_DB_ENV = "STEPAHEAD_RESPONSES_DB"
MEMORY_ONLY = ":memory:"
MAX_NESTING = 100   # tables or arrays within one another in a config file (a real one nests ~4)
SERVER_KEYS = ("host", "port", "max_body_bytes", "default_completion_reserve_tokens", "queue_timeout_s",
               "keep_alive_s", "body_timeout_s", "responses_db", "responses_per_tenant", "conversations_per_tenant",
               "conversation_bytes_per_tenant", "freeze_startup_heap", "shutdown_timeout_s", "max_file_bytes",
               "file_bytes_per_tenant", "batch_concurrency", "batch_yield", "batches_running_per_tenant")
TOP_LEVEL_KEYS = ("models", "tenants", "server", "tracing")
UTF8_BOM = b"\xef\xbb\xbf"   # what Windows editors put first in a UTF-8 file: no part of the TOML


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    models: tuple[ModelConfig, ...]
    tenants: tuple[TenantConfig, ...]
    tracing: TraceConfig = TraceConfig()
    max_body_bytes: int = 8 * 1024 * 1024
    default_completion_reserve_tokens: int = 256
    queue_timeout_s: float = 30.0
    host: str = "127.0.0.1"
    port: int = 8000
    # How long an idle client connection stays open. Longer than clients keep theirs
    # (httpx 5 s, aiohttp 15 s), so a client never sends on a connection the server is
    # closing at that moment ("Server disconnected"); uvicorn's own default is 5 s.
    keep_alive_s: float = DEFAULT_KEEP_ALIVE_S
    # The longest a request's body may go without a byte while it is read (idle time
    # between two of its pieces, not its whole time): past it a 408, the connection closed
    # (gateway/body_timeout.py).
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S
    # On SIGTERM or Ctrl+C, how long requests in flight may run on before they are cut
    # (uvicorn's graceful-shutdown timeout); None waits for every one to finish.
    shutdown_timeout_s: float | None = None
    # Stored Responses: the SQLite file that keeps them across restarts (None: the
    # default place, see `resolved_responses_db`; ":memory:": memory only), and how many
    # each tenant keeps.
    responses_db: str | None = None
    responses_per_tenant: int = 1024
    # The Conversations API's conversations each tenant keeps (its least recently used
    # leave first), in `conversations.sqlite3` beside the responses' file.
    conversations_per_tenant: int = 10_000
    # The bytes of items (their JSON) each tenant's conversations may hold: past it an add
    # is refused (gateway/conversation_bytes.py).
    conversation_bytes_per_tenant: int = DEFAULT_CONVERSATION_BYTES_PER_TENANT
    # The Files API's largest upload, and how many requests of one batch run at a time.
    max_file_bytes: int = 200 * 1024 * 1024
    # The bytes of live files each tenant may keep (uploads refused past it; batch outputs
    # counted, never refused: gateway/file_quota.py); 0 refuses every upload.
    file_bytes_per_tenant: int = DEFAULT_FILE_BYTES_PER_TENANT
    batch_concurrency: int = 2
    # The batches of one tenant that run at once; more wait `validating`, oldest first
    # (gateway/batch_places.py).
    batches_running_per_tenant: int = 4
    batch_yield: bool = True   # while other requests are in flight, one batch request at a time
    # Freeze what start-up made so full garbage collections skip it (gateway/heap.py).
    freeze_startup_heap: bool = True
    # The admin tenants' names, from `tenants` (a set: asked on every metrics scrape and
    # trace-viewer request, whatever the number of tenants).
    admins: frozenset[str] = field(init=False, repr=False, compare=False, default=frozenset())
    flex_tenants: frozenset[str] = field(init=False, repr=False, compare=False, default=frozenset())
    # The models each tenant that names its `models` may use (tenants not here: every model).
    tenant_models: Mapping[str, frozenset[str]] = field(init=False, repr=False, compare=False, default_factory=dict)

    def resolved_responses_db(self, environ: Mapping[str, str] = os.environ) -> Path | None:
        """Where stored Responses live: config, then $STEPAHEAD_RESPONSES_DB, then the
        user's data dir (e.g. ~/.local/share/stepahead/responses.sqlite3); None for
        ":memory:" (kept in memory only, lost on restart)."""
        configured = self.responses_db or environ.get(RESPONSES_DB_ENV)
        return None if configured == MEMORY_ONLY else data_file(configured, "responses.sqlite3")

    def resolved_conversations_db(self, environ: Mapping[str, str] = os.environ) -> Path | None:
        """Where the Conversations API keeps conversations: `conversations.sqlite3` in the
        directory of the responses' file; None (memory only) when that is ":memory:"."""
        responses = self.resolved_responses_db(environ)
        return None if responses is None else responses.with_name("conversations.sqlite3")

    def resolved_files_dir(self, environ: Mapping[str, str] = os.environ) -> Path | None:
        """Where the Files and Batch APIs keep files and batches: `files/` in the directory
        of the responses' file; None (a temporary directory) when that is ":memory:"."""
        responses = self.resolved_responses_db(environ)
        return None if responses is None else responses.parent / "files"

    def __post_init__(self) -> None:
        for name in ("max_body_bytes", "default_completion_reserve_tokens", "queue_timeout_s", "keep_alive_s",
                     "body_timeout_s", "responses_per_tenant", "conversations_per_tenant",
                     "conversation_bytes_per_tenant", "max_file_bytes", "batch_concurrency",
                     "batches_running_per_tenant"):
            positive(getattr(self, name), f"server.{name}")
        if not self.file_bytes_per_tenant >= 0:
            raise ConfigError(f"server.file_bytes_per_tenant must be >= 0, not {self.file_bytes_per_tenant!r}")
        if self.shutdown_timeout_s is not None and not self.shutdown_timeout_s >= 0:
            raise ConfigError(f"server.shutdown_timeout_s must be >= 0, got {self.shutdown_timeout_s}")
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"server.port must be in [0, 65535], got {self.port}")
        for kind, names in (("model", [m.name for m in self.models]),
                            ("tenant", [t.name for t in self.tenants])):
            duplicates = {n for n, count in Counter(names).items() if count > 1}
            if duplicates:
                raise ConfigError(f"duplicate {kind} name(s): {sorted(duplicates)}")
        object.__setattr__(self, "admins", frozenset(t.name for t in self.tenants if t.admin))
        object.__setattr__(self, "flex_tenants", frozenset(t.name for t in self.tenants if t.service_tier == "flex"))
        object.__setattr__(self, "tenant_models", MappingProxyType(
            {t.name: frozenset(t.models) for t in self.tenants if t.models is not None}))
        owners: dict[str, str] = {}
        for tenant in self.tenants:
            for digest in tenant.key_digests:
                owner = owners.setdefault(digest.lower(), tenant.name)
                if owner != tenant.name:
                    raise ConfigError(f"the same API key is given to tenants {owner!r} and {tenant.name!r}")

    def is_admin(self, tenant: str) -> bool:
        """Whether `tenant`'s keys see every tenant's traces and metrics."""
        return tenant in self.admins

    def service_tier(self, tenant: str, asked: str | None) -> str | None:
        """The `service_tier` a request of `tenant` to a local model runs with: "flex" for a
        flex tenant, else what the request `asked` (gateway/service_tiers.py)."""
        return "flex" if tenant in self.flex_tenants else asked


def default_config(demo_key: str, *, model: str = DEFAULT_LOCAL_MODEL, num_workers: int = 2,
                   engine_options: dict[str, Any] | None = None) -> GatewayConfig:
    """One local model for one demo tenant, its only tenant and so its admin (it sees the
    workers' metrics). `model` is "smollm2", "tiny" or a local model directory, served
    under its own name (a directory's name)."""
    if num_workers < 1:
        raise ConfigError("num_workers must be >= 1")
    name = model if model in BUILTIN_LOCAL_MODELS else Path(model).name or model
    return GatewayConfig(
        models=(LocalModelConfig(name=name, path=model, num_workers=num_workers,
                                 engine_options=tuple(sorted((engine_options or {}).items()))),),
        tenants=(TenantConfig(name="demo", key_digests=(key_digest(demo_key),), admin=True),))



def parse_config(data: dict) -> GatewayConfig:
    reject_unknown_keys(data, TOP_LEVEL_KEYS, "the config", "table")
    models = tuple(model_config(t, i) for i, t in enumerate(tables_at(data, "models")))
    tenants = tuple(parse_tenant(t, i) for i, t in enumerate(tables_at(data, "tenants")))
    if not models or not tenants:
        raise ConfigError("the config needs at least one [[models]] and one [[tenants]]")
    if sum(t.kv_share for t in tenants) > 1.0 + 1e-9:
        raise ConfigError("tenants' kv_share values sum to more than 1 (they are fractions of the hot KV blocks)")
    problem = (engine_tenants_problem(models, {tenant.name for tenant in tenants})
               or unserved_tenant_model(tenants, {model.name for model in models}))
    if problem:
        raise ConfigError(problem)
    server = table_at(data.get("server", {}), "server")
    reject_unknown_keys(server, SERVER_KEYS, "server")
    try:
        tracing = parse_trace_config(table_at(data.get("tracing", {}), "tracing"))
    except TraceConfigError as exc:
        raise ConfigError(str(exc)) from None
    return GatewayConfig(
        models=models, tenants=tenants,
        tracing=tracing,
        max_body_bytes=take(server, "max_body_bytes", int, "server", 8 * 1024 * 1024),
        default_completion_reserve_tokens=take(
            server, "default_completion_reserve_tokens", int, "server", 256),
        queue_timeout_s=float(take(server, "queue_timeout_s", (int, float), "server", 30.0)),
        host=take(server, "host", str, "server", "127.0.0.1"),
        port=take(server, "port", int, "server", 8000),
        keep_alive_s=float(take(server, "keep_alive_s", (int, float), "server", DEFAULT_KEEP_ALIVE_S)),
        body_timeout_s=float(take(server, "body_timeout_s", (int, float), "server", DEFAULT_BODY_TIMEOUT_S)),
        responses_db=take(server, "responses_db", str, "server", None),
        responses_per_tenant=take(server, "responses_per_tenant", int, "server", 1024),
        conversations_per_tenant=take(server, "conversations_per_tenant", int, "server", 10_000),
        conversation_bytes_per_tenant=take(server, "conversation_bytes_per_tenant", int, "server",
                                           DEFAULT_CONVERSATION_BYTES_PER_TENANT),
        max_file_bytes=take(server, "max_file_bytes", int, "server", 200 * 1024 * 1024),
        file_bytes_per_tenant=take(server, "file_bytes_per_tenant", int, "server", DEFAULT_FILE_BYTES_PER_TENANT),
        batch_concurrency=take(server, "batch_concurrency", int, "server", 2),
        batches_running_per_tenant=take(server, "batches_running_per_tenant", int, "server", 4),
        batch_yield=take(server, "batch_yield", bool, "server", True),
        freeze_startup_heap=take(server, "freeze_startup_heap", bool, "server", True),
        shutdown_timeout_s=_optional_float(take(server, "shutdown_timeout_s", (int, float), "server", None)))


def _optional_float(value: int | float | None) -> float | None:
    return None if value is None else float(value)


def load_config(path: str | Path) -> GatewayConfig:
    """The config in the TOML file at `path` (a UTF-8 BOM first is skipped). Tables or
    arrays nested past `MAX_NESTING` are a ConfigError, never a RecursionError from the
    parser or a later walk (the check, the start and a SIGHUP reload all say it)."""
    too_deep = f"{path}: tables or arrays nested too deeply (more than {MAX_NESTING} levels)"
    try:
        with open(path, "rb") as f:
            raw = f.read()
        body = raw.removeprefix(UTF8_BOM)
        data = tomllib.loads(body.decode())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    except UnicodeDecodeError as exc:   # at its byte in the file, the BOM counted
        raise ConfigError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start + len(raw) - len(body)})") from None
    except RecursionError:   # the parser recurses once per nested array or inline table
        raise ConfigError(too_deep) from None
    if nesting_depth(data) > MAX_NESTING:   # `[a.b.c...]` headers nest without the parser recursing
        raise ConfigError(too_deep)
    return parse_config(data)


def nesting_depth(value: Any) -> int:
    """How many tables and arrays `value` holds within one another (0 for a scalar);
    walked without recursing."""
    deepest, pending = 0, [(value, 0)]
    while pending:
        item, depth = pending.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            deepest = max(deepest, depth)
        else:
            deepest = max(deepest, depth + 1)
            pending.extend((child, depth + 1) for child in children)
    return deepest

