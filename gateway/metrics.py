"""Prometheus metrics, kept in memory and rendered as text on `GET /metrics`.

Scraping needs an API key: a tenant's key sees only its own series, an admin key all of
them (the workers' gauges are shown to admins only).

Counter names follow vLLM's where one exists (`vllm:prompt_tokens_total`,
`vllm:prefix_cache_queries_total`/`_hits_total` counted in tokens,
`vllm:time_to_first_token_seconds`), so existing dashboards work; every series is
labelled by `tenant` and, where a worker served it, `worker`.
Invariant: recording is a dict update on the event loop (no locks, no I/O); the text is
built only when scraped. One registry per app, built in `build_app()`.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from agents_trace.prompt_blocks import evicted_prefix_tokens
from gateway.worker_runs import WorkerRun

Labels = tuple[tuple[str, str], ...]

TTFT_BUCKETS_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                  2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
OVERHEAD_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1)

HELP = {
    "stepahead_requests_total": ("counter", "HTTP requests by tenant, model, endpoint and status."),
    "vllm:request_success_total": ("counter", "Finished requests by finish reason (a request cut short is none)."),
    "vllm:prompt_tokens_total": (
        "counter", "Prefill tokens processed (by requests cut short too; embeddings' input tokens, as charged)."),
    "vllm:generation_tokens_total": ("counter", "Generation tokens processed (requests cut short too)."),
    "vllm:prefix_cache_queries_total": ("counter", "Prefix cache queries, in prompt tokens."),
    "vllm:prefix_cache_hits_total": ("counter", "Prefix cache hits, in prompt tokens."),
    "vllm:time_to_first_token_seconds": ("histogram", "Time to first token, as the gateway saw it."),
    "stepahead_gateway_overhead_seconds": ("histogram", "Time spent in the gateway itself."),
    "stepahead_rejected_total": (
        "counter", "Requests refused by tenant limits (the model's per-tenant queue too), by error code."),
    "stepahead_prefix_from_previous_tokens_total": (
        "counter", "Prompt tokens the session's previous prompt began with (traced local steps; "
                   "none on a model with prefix caching off)."),
    "stepahead_evicted_prefix_tokens_total": (
        "counter", "Of those, tokens no longer cached when the step came: evicted while the session was away."),
    "stepahead_tenant_active_requests": ("gauge", "Requests holding a concurrency slot."),
    "stepahead_tenant_queued_requests": ("gauge", "Requests waiting for a concurrency slot."),
    "stepahead_tenant_token_budget": ("gauge", "The tenant's token_budget (tenants with one)."),
    "stepahead_tenant_batches_running": ("gauge", "The tenant's batches (Batch API) running."),
    "stepahead_tenant_batch_requests_pending": ("gauge", "Requests of the tenant's running batches without a result."),
    "stepahead_tenant_spent_tokens": (
        "gauge", "Tokens the tenant has spent while it had a token_budget, across restarts and reloads "
                 "(tenants with one)."),
    "stepahead_worker_info": ("gauge", "1 for each worker of a local model (its fields: _level, _counts_total)."),
    "stepahead_worker_level": (
        "gauge", "Worker fields that are levels now: readiness, requests in flight, running and waiting, "
                 "blocks per cache tier (tiers flattened)."),
    "stepahead_worker_counts_total": (
        "counter", "Worker fields that count since the worker started (0 again after a restart): decode passes, "
                   "tokens, evictions, the KV policy's pins and prefetches."),
    "stepahead_worker_tenant_info": ("gauge", "1 for each tenant a worker's cache holds or served."),
    "stepahead_worker_tenant_level": (
        "gauge", "Per-tenant levels of each worker's cache (its hot, host, reserved and pinned blocks among them)."),
    "stepahead_worker_tenant_counts_total": (
        "counter", "Per-tenant counts of each worker's cache since the worker started (requests, tokens)."),
    "stepahead_router_info": ("gauge", "1 for each local model's router."),
    "stepahead_router_counts_total": ("counter", "The engine's routing and dispatch counts since it started."),
    "stepahead_prompt_token_cache_info": ("gauge", "1 for each model with a prompt token cache."),
    "stepahead_prompt_token_cache_counts_total": (
        "counter", "Prompts tokenized from a tenant's earlier prompt's ids (num_spliced, num_reused_ids) since "
                   "the start."),
    "stepahead_prompt_token_cache_level": ("gauge", "The prompt token cache's state: off=1 once it turned off."),
    "stepahead_gc_collections_total": ("counter", "The gateway's garbage collections while serving, by generation."),
    "stepahead_gc_pause_seconds_total": (
        "counter", "Time those collections paused the gateway (every thread waits), by generation."),
    "stepahead_gc_pause_max_seconds": ("gauge", "The longest of those pauses, by generation."),
    "stepahead_gc_frozen_objects": ("gauge", "Objects frozen at start-up (counted then), which full collections skip."),
    "stepahead_forecasts_total": (
        "counter", "Forecasts made for finished agent steps, by source (predictor, or gaps where it was not confident)."),
    "stepahead_forecasts_forwarded_total": ("counter", "Forecasts handed to the local engines' KV caches."),
    "stepahead_trace_steps_total": ("counter", "Agent steps the trace writer handled."),
    "stepahead_trace_dropped_events_total": (
        "counter", "Trace events dropped because the writer's queue was full (their steps are not stored)."),
    "stepahead_trace_errors_total": (
        "counter", "Trace writer failures by kind: store (a step or batch not written), subscriber, forecaster."),
    "stepahead_trace_stores_set_aside_total": (
        "counter", "Trace stores found damaged, set aside and started anew."),
    "stepahead_response_archive_errors_total": (
        "counter", "Stored-response archive reads and writes that failed (memory served instead)."),
    "stepahead_forecaster_checkpoints_total": (
        "counter", "Saves of the forecasters' learned state to disk, by outcome (saved, failed)."),
}


@dataclass(slots=True)
class Histogram:
    buckets: tuple[float, ...]
    counts: list[int]
    total: float = 0.0
    num_observations: int = 0

    def observe(self, value: float) -> None:
        index = bisect.bisect_left(self.buckets, value)
        if index < len(self.counts):
            self.counts[index] += 1
        self.total += value
        self.num_observations += 1


@dataclass(slots=True)
class Registry:
    """All series of one app. `counters`/`gauges` map (name, labels) → value.

    Invariant: `_keys_of_tenant` lists every counter and histogram key labelled with a
    tenant under that tenant, so a tenant's own scrape reads its series, not every
    tenant's."""

    counters: dict[tuple[str, Labels], float] = field(default_factory=dict)
    histograms: dict[tuple[str, Labels], Histogram] = field(default_factory=dict)
    _keys_of_tenant: dict[str, list[tuple[str, Labels]]] = field(default_factory=dict)

    def inc(self, name: str, labels: Labels, amount: float = 1.0) -> None:
        key = (name, labels)
        value = self.counters.get(key)
        if value is None:
            value = 0.0
            self._index(key)
        self.counters[key] = value + amount

    def observe(self, name: str, labels: Labels, value: float,
                buckets: tuple[float, ...] = TTFT_BUCKETS_S) -> None:
        key = (name, labels)
        histogram = self.histograms.get(key)
        if histogram is None:
            histogram = self.histograms[key] = Histogram(buckets, [0] * len(buckets))
            self._index(key)
        histogram.observe(value)

    def _index(self, key: tuple[str, Labels]) -> None:
        for label, value in key[1]:
            if label == "tenant":
                self._keys_of_tenant.setdefault(value, []).append(key)

    def record_request(self, tenant: str, model: str, endpoint: str, status: int) -> None:
        self.inc("stepahead_requests_total", (("tenant", tenant), ("model_name", model),
                                              ("endpoint", endpoint), ("status", str(status))))

    def record_rejection(self, tenant: str, code: str) -> None:
        self.inc("stepahead_rejected_total", (("tenant", tenant), ("code", code)))

    def record_finish(self, *, tenant: str, model: str, worker: str, finish_reason: str,
                      num_prompt_tokens: int, num_cached_tokens: int,
                      num_output_tokens: int, ttft_s: float | None, service_tier: str = "default",
                      runs: tuple[WorkerRun, ...] = ()) -> None:
        """A finished request: its tokens (`record_tokens`) and one success by its finish
        reason, on the worker that finished it (the last of `runs`, when it was resumed
        mid-stream on another). Label values are strings whatever a backend reported (an
        upstream's `finish_reason` may be anything): series sort, and render, by them."""
        labels = self.record_tokens(tenant=tenant, model=model, worker=worker, num_prompt_tokens=num_prompt_tokens,
                                    num_cached_tokens=num_cached_tokens, num_output_tokens=num_output_tokens,
                                    ttft_s=ttft_s, service_tier=service_tier, runs=runs)
        self.inc("vllm:request_success_total", labels + (("finished_reason", str(finish_reason)),))

    def record_tokens(self, *, tenant: str, model: str, worker: str, num_prompt_tokens: int, num_cached_tokens: int,
                      num_output_tokens: int, ttft_s: float | None, service_tier: str = "default",
                      runs: tuple[WorkerRun, ...] = ()) -> Labels:
        """The tokens a request the model ran used, and its time to first token when one
        came: a finished request's (`record_finish`), or one cut short (its client left, or
        it failed after the model started), which counts no success. The time to first
        token is kept per `service_tier`, so a tenant's batch (flex) requests, which wait
        behind its agents, do not read as its agents' latency. A request resumed mid-stream
        on another worker (`runs`, its workers in order: gateway/worker_runs.py) counts its
        prompt, cached tokens and TTFT on `worker`, its first, and its generated tokens on
        each run's worker (the last one's: the rest of `num_output_tokens`). Returns the
        labels of the series of the worker that ran it last."""
        labels = (("tenant", tenant), ("model_name", model), ("worker", str(worker)))
        self.inc("vllm:prompt_tokens_total", labels, num_prompt_tokens)
        self.inc("vllm:prefix_cache_queries_total", labels, num_prompt_tokens)
        self.inc("vllm:prefix_cache_hits_total", labels, num_cached_tokens)
        if ttft_s is not None:
            self.observe("vllm:time_to_first_token_seconds", labels + (("service_tier", service_tier),), ttft_s)
        if not runs:
            self.inc("vllm:generation_tokens_total", labels, num_output_tokens)
            return labels
        num_earlier = 0
        for index, run in enumerate(runs):
            labels = (("tenant", tenant), ("model_name", model), ("worker", str(run.worker)))
            is_last = index == len(runs) - 1
            num_tokens = max(0, num_output_tokens - num_earlier) if is_last else run.num_output_tokens
            self.inc("vllm:generation_tokens_total", labels, num_tokens)
            num_earlier += num_tokens
        return labels

    def record_embedding_tokens(self, *, tenant: str, model: str, worker: str, num_input_tokens: int) -> None:
        """An embeddings request's input tokens, as its tenant was charged them (a failure's
        estimate too, where one is charged), in `vllm:prompt_tokens_total`, as vLLM counts a
        pooling model's prompts, under the chat series' labels: `worker` "upstream" for an
        upstream model, `gateway` for a local embedding model (it runs in the gateway's
        process). Nothing else: no generation tokens (none are made), no prefix-cache
        queries (no embedding model here keeps one), no success (embeddings have no finish
        reason; `stepahead_requests_total` counts them by status)."""
        if num_input_tokens:
            self.inc("vllm:prompt_tokens_total", (("tenant", tenant), ("model_name", model), ("worker", str(worker))),
                     num_input_tokens)

    def record_prefix_reuse(self, tenant: str, model: str, num_from_previous: int, num_cached: int) -> None:
        """A step whose prompt began with `num_from_previous` tokens of its session's
        previous prompt, of which the cache served `num_cached` or more. Only for a model
        that keeps a prefix cache: with none, nothing was kept to be evicted (the tracer
        then reports no reuse: gateway/exchange.py)."""
        labels = (("tenant", tenant), ("model_name", model))
        self.inc("stepahead_prefix_from_previous_tokens_total", labels, num_from_previous)
        self.inc("stepahead_evicted_prefix_tokens_total", labels, evicted_prefix_tokens(num_from_previous, num_cached))

    def record_overhead(self, tenant: str, overhead_s: float) -> None:
        self.observe("stepahead_gateway_overhead_seconds", (("tenant", tenant),), overhead_s,
                     OVERHEAD_BUCKETS_S)

    def render(self, gauges: dict[tuple[str, Labels], float] | None = None,
               tenant: str | None = None) -> str:
        """Prometheus text exposition (format 0.0.4). `gauges` are computed at scrape time.
        With `tenant`, only the series labelled with that tenant (a tenant's own view)."""
        own = self._keys_of_tenant.get(tenant, []) if tenant is not None else None

        def visible(series: dict, indexed: bool = True) -> list:
            """`series` items sorted by key, only `tenant`'s when one is given."""
            if tenant is None:
                items = series.items()
            elif indexed:
                items = ((key, series[key]) for key in own if key in series)
            else:
                items = (item for item in series.items() if ("tenant", tenant) in item[0][1])
            return sorted(items, key=lambda item: item[0])

        by_name: dict[str, list[str]] = {}
        for (name, labels), value in visible(self.counters):
            by_name.setdefault(name, []).append(f"{name}{_labels(labels)} {_number(value)}")
        for (name, labels), value in visible(gauges or {}, indexed=False):
            by_name.setdefault(name, []).append(f"{name}{_labels(labels)} {_number(value)}")
        for (name, labels), histogram in visible(self.histograms):
            lines = by_name.setdefault(name, [])
            cumulative = 0
            for bound, count in zip(histogram.buckets, histogram.counts):
                cumulative += count
                lines.append(f"{name}_bucket{_labels(labels + (('le', _number(bound)),))} "
                             f"{cumulative}")
            lines.append(f"{name}_bucket{_labels(labels + (('le', '+Inf'),))} "
                         f"{histogram.num_observations}")
            lines.append(f"{name}_sum{_labels(labels)} {_number(histogram.total)}")
            lines.append(f"{name}_count{_labels(labels)} {histogram.num_observations}")
        out: list[str] = []
        for name, lines in by_name.items():
            kind, text = HELP.get(name, ("untyped", name))
            # NOTE: text format 0.0.4 names a counter's family as its samples (`x_total`);
            # OpenMetrics would drop the suffix, but this is not served as OpenMetrics
            out.append(f"# HELP {name} {text}")
            out.append(f"# TYPE {name} {kind}")
            out.extend(lines)
        return "\n".join(out) + "\n"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(labels: Labels) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{key}="{_escape(value)}"' for key, value in labels) + "}"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))
