"""Everything one running gateway app owns, built in `build_app()`.

Invariant: there is exactly one `GatewayState` per app, reached through
`app.state.gateway`; nothing here is module-level, so two apps in one process (tests,
benchmarks) never share keys, limits or metrics.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from agents_trace.tracer import AgentTracer

from gateway.auth import KeyRing
from gateway.batch_runner import BatchRunner
from gateway.batch_store import BatchStore
from gateway.backend import Backend
from gateway.background_runs import BackgroundRuns
from gateway.config import GatewayConfig
from gateway.conversation_archive import ConversationArchive
from gateway.conversation_locks import ConversationLocks
from gateway.conversation_store import ConversationStore
from gateway.errors import model_not_found
from gateway.file_store import FileStore
from gateway.heap import GcPauses
from gateway.limiters import Limiters
from gateway.live_responses import LiveResponses
from gateway.metrics import Registry
from gateway.response_store import ResponseStore
from gateway.schema_checks import SchemaChecker
from gateway.version import installed_version


@dataclass(slots=True)
class GatewayState:
    config: GatewayConfig
    keys: KeyRing
    limiters: Limiters
    metrics: Registry
    backends: dict[str, Backend] = field(default_factory=dict)
    tracer: AgentTracer | None = None
    forecasts: object | None = None  # gateway.forecasting.ForecastRelay when forecasting runs
    is_ready: bool = False
    responses: ResponseStore = field(default_factory=ResponseStore)  # the Responses API's stored replies
    # the Conversations API's conversations (in memory unless build_app names a file)
    conversations: ConversationStore = field(
        default_factory=lambda: ConversationStore(ConversationArchive(None, capacity=10_000)))
    # the Files API's files and the Batch API's batches (in a temporary directory unless
    # build_app names one)
    files: FileStore = field(default_factory=lambda: FileStore(None))
    batches: BatchRunner | None = None
    created_s: int = field(default_factory=lambda: int(time.time()))  # the models' `created`
    schemas: SchemaChecker = field(default_factory=SchemaChecker)  # tool schemas that passed their check
    background: BackgroundRuns = field(default_factory=BackgroundRuns)  # background responses in flight
    live_responses: LiveResponses = field(default_factory=LiveResponses)  # stored foreground ones in flight
    conversation_locks: ConversationLocks = field(default_factory=ConversationLocks)  # turns running on them
    gc_pauses: GcPauses = field(default_factory=GcPauses)  # the collector's pauses while serving
    version: str = field(default_factory=installed_version)  # read once: it reads package metadata files

    def cancel_start(self) -> None:
        """Stop the backends' starts in progress (Ctrl+C while the gateway starts)."""
        for backend in self.backends.values():
            backend.cancel_start()

    def backend(self, model: str, tenant: str) -> Backend:
        """The backend of `model` for `tenant`'s request: a 404 `model_not_found` for a
        model not served, or one its `models` leave out (as OpenAI answers a model a key
        has no access to), naming only the models the tenant may use."""
        if not self.serves(model, tenant):
            raise model_not_found(model, sorted(self.models_for(tenant)))
        return self.backends[model]

    def serves(self, model: str, tenant: str) -> bool:
        """Whether `model` is served and `tenant`'s `models` (if it names any) hold it."""
        allowed = self.config.tenant_models.get(tenant)
        return model in self.backends and (allowed is None or model in allowed)

    def models_for(self, tenant: str) -> dict[str, Backend]:
        """The served models `tenant`'s requests may use, in the config's order."""
        allowed = self.config.tenant_models.get(tenant)
        if allowed is None:
            return dict(self.backends)
        return {name: backend for name, backend in self.backends.items() if name in allowed}


def batch_runner(state: GatewayState, root, concurrency: int, *, yields: bool) -> BatchRunner:
    """The state's batch runner, its batches beside its files (`root`; None: temporary);
    with `yields`, batches give way to the other requests in flight."""
    def load() -> int:
        return sum(limiter.num_active for _, limiter in state.limiters.items())
    return BatchRunner(BatchStore(root), state.files, lambda: state.keys, concurrency, load=load if yields else None,
                       running_per_tenant=lambda: state.config.batches_running_per_tenant)
