"""Prometheus metrics, kept in memory and rendered as text on `GET /metrics`.

Scraping needs an API key: a tenant's key sees only its own series, an admin key all of
them (the workers' gauges are shown to admins only).

Counter names follow vLLM's where one exists (`vllm:prompt_tokens_total`,
`vllm:prefix_cache_queries_total`/`_hits_total` counted in tokens,
`vllm:time_to_first_token_seconds`), so existing dashboards work; every series is
labelled by `tenant` and, where a worker served it, `worker`. The OpenTelemetry GenAI
model-server histograms (`gen_ai_server_*`) are recorded here by gateway/metrics_genai.py.
Invariant: recording is a dict update on the event loop (no locks, no I/O); the text is
built only when scraped, from a `Snapshot` (copies taken on the loop) in a thread, so a
large scrape (thousands of tenants' series) never holds the loop while it sorts and
formats. One registry per app, built in `build_app()`.
"""
from __future__ import annotations

import bisect
import itertools
import operator
from dataclasses import dataclass, field

from agents_trace.prompt_blocks import evicted_prefix_tokens
from gateway.metrics_help import HELP
from gateway.worker_runs import WorkerRun

Labels = tuple[tuple[str, str], ...]

TTFT_BUCKETS_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                  2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
OVERHEAD_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1)
CONFIG_RELOADS = "stepahead_config_reloads_total"
LAST_RELOAD_SUCCESS = "stepahead_config_last_reload_success_timestamp_seconds"   # as Prometheus' own



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
class Snapshot:
    """The series one scrape shows, as they were when it began: (key, value) items,
    unsorted, and copies of the histograms (the registry's own change as requests finish).
    Nothing else holds these lists, so a thread may sort and format them."""

    counters: list[tuple[tuple[str, Labels], float]]
    gauges: list[tuple[tuple[str, Labels], float]]
    histograms: list[tuple[tuple[str, Labels], Histogram]]


@dataclass(slots=True)
class Registry:
    """All series of one app. `counters`/`gauges` map (name, labels) → value.

    Invariant: `_keys_of_tenant` lists every counter and histogram key labelled with a
    tenant under that tenant, so a tenant's own scrape reads its series, not every
    tenant's. `counters` also holds the one gauge set as things happen, not computed at
    scrape time (`LAST_RELOAD_SUCCESS`: rendered alike, typed by HELP)."""

    counters: dict[tuple[str, Labels], float] = field(default_factory=dict)
    histograms: dict[tuple[str, Labels], Histogram] = field(default_factory=dict)
    _keys_of_tenant: dict[str, list[tuple[str, Labels]]] = field(default_factory=dict)
    # rendering's caches (render_snapshot): label text by labels, `le` texts by bucket layout
    _label_texts: dict[Labels, str] = field(default_factory=dict, repr=False, compare=False)
    _bound_texts: dict[tuple[float, ...], tuple[str, ...]] = field(default_factory=dict, repr=False, compare=False)

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

    def record_config_loaded(self, now_s: float) -> None:
        """The start's config in force since `now_s` (wall clock, seconds): no reload yet of
        either outcome, the last success that start's. For admins only, as no tenant label."""
        for outcome in ("applied", "refused"):
            self.inc(CONFIG_RELOADS, (("outcome", outcome),), 0.0)
        self.counters[(LAST_RELOAD_SUCCESS, ())] = now_s

    def record_reload(self, applied: bool, now_s: float) -> None:
        """A SIGHUP reload (gateway/reload.py) `applied` or refused at `now_s` (wall clock)."""
        self.inc(CONFIG_RELOADS, (("outcome", "applied" if applied else "refused"),))
        if applied:
            self.counters[(LAST_RELOAD_SUCCESS, ())] = now_s

    def record_overhead(self, tenant: str, overhead_s: float) -> None:
        self.observe("stepahead_gateway_overhead_seconds", (("tenant", tenant),), overhead_s,
                     OVERHEAD_BUCKETS_S)

    def snapshot(self, gauges: dict[tuple[str, Labels], float] | None = None,
                 tenant: str | None = None) -> Snapshot:
        """The series a scrape shows, copied as they are now: `gauges` (computed at scrape
        time) and, with `tenant`, only the series labelled with that tenant (a tenant's own
        view). Call it on the event loop: it only copies (no sorting, no formatting), so
        the loop may record on while `render_snapshot` formats the copy in a thread."""
        if tenant is None:
            counters = list(self.counters.items())
            histograms = list(self.histograms.items())
            shown_gauges = list((gauges or {}).items())
        else:
            own = self._keys_of_tenant.get(tenant, [])
            counters = [(key, self.counters[key]) for key in own if key in self.counters]
            histograms = [(key, self.histograms[key]) for key in own if key in self.histograms]
            shown_gauges = [item for item in (gauges or {}).items() if ("tenant", tenant) in item[0][1]]
        return Snapshot(counters, shown_gauges,
                        [(key, Histogram(h.buckets, h.counts.copy(), h.total, h.num_observations))
                         for key, h in histograms])

    def render(self, gauges: dict[tuple[str, Labels], float] | None = None,
               tenant: str | None = None) -> str:
        """Prometheus text exposition (format 0.0.4). `gauges` are computed at scrape time.
        With `tenant`, only the series labelled with that tenant (a tenant's own view).
        All at once, on the caller's thread: `GET /metrics` takes the `snapshot` on the
        loop and runs `render_snapshot` in a thread instead."""
        return self.render_snapshot(self.snapshot(gauges, tenant))

    def render_snapshot(self, snapshot: Snapshot) -> str:
        """`snapshot`'s text, series sorted by (name, labels) within each family. Safe off
        the event loop: it reads only the snapshot's copies and the caches `_label_texts`
        and `_bound_texts`, which nothing but rendering touches (each entry is written
        whole, the same text by whichever render writes it)."""
        by_name: dict[str, list[str]] = {}
        label_texts = self._label_texts
        for (name, labels), value in sorted(snapshot.counters, key=_SERIES_KEY):
            by_name.setdefault(name, []).append(f"{name}{_cached_labels(label_texts, labels)} {_number(value)}")
        for (name, labels), value in sorted(snapshot.gauges, key=_SERIES_KEY):
            by_name.setdefault(name, []).append(f"{name}{_labels(labels)} {_number(value)}")
        for (name, labels), histogram in sorted(snapshot.histograms, key=_SERIES_KEY):
            lines = by_name.setdefault(name, [])
            text = _cached_labels(label_texts, labels)
            # `{name}_bucket{labels,le="bound"} cumulative` for each bound, then +Inf's:
            # joined in C (map/zip), not a line of Python per bucket
            bucket_open = f"{name}_bucket{{{text[1:-1]}," if text else f"{name}_bucket{{"
            cumulative = itertools.chain(itertools.accumulate(histogram.counts), (histogram.num_observations,))
            bounds = _bound_texts(self._bound_texts, histogram.buckets)
            lines.extend(map("".join, zip(itertools.repeat(bucket_open), bounds, map(str, cumulative))))
            lines.append(f"{name}_sum{text} {_number(histogram.total)}")
            lines.append(f"{name}_count{text} {histogram.num_observations}")
        out: list[str] = []
        for name, lines in by_name.items():
            kind, text = HELP.get(name, ("untyped", name))
            # NOTE: text format 0.0.4 names a counter's family as its samples (`x_total`);
            # OpenMetrics would drop the suffix, but this is not served as OpenMetrics
            out.append(f"# HELP {name} {text}")
            out.append(f"# TYPE {name} {kind}")
            out.extend(lines)
        return "\n".join(out) + "\n"


_SERIES_KEY = operator.itemgetter(0)   # a (key, value) item's (name, labels): how series sort


def _cached_labels(label_texts: dict[Labels, str], labels: Labels) -> str:
    """`_labels(labels)`, kept in `label_texts` for the next scrape (counters' and
    histograms' labels only: their keys stay in the registry, so the cache holds no more
    entries than the registry has series; gauges come and go with each scrape)."""
    text = label_texts.get(labels)
    if text is None:
        text = label_texts[labels] = _labels(labels)
    return text


def _bound_texts(bound_texts: dict[tuple[float, ...], tuple[str, ...]],
                 buckets: tuple[float, ...]) -> tuple[str, ...]:
    """Each bucket's `le="bound"} ` (escaped, as `_labels` would), then +Inf's, the end of
    its `_bucket` line but the count, kept in `bound_texts` (one entry per bucket layout:
    `TTFT_BUCKETS_S`, `OVERHEAD_BUCKETS_S`)."""
    texts = bound_texts.get(buckets)
    if texts is None:
        texts = tuple(f'le="{_escape(_number(bound))}"}} ' for bound in buckets) + ('le="+Inf"} ',)
        bound_texts[buckets] = texts
    return texts


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(labels: Labels) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{key}="{_escape(value)}"' for key, value in labels) + "}"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))
