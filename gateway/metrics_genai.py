"""The OpenTelemetry GenAI model-server histograms on `GET /metrics`.

The GenAI semantic conventions ("Generative AI model server metrics") define three
histograms, named here by OpenTelemetry's Prometheus mapping (dots to underscores, the
unit `s` as `_seconds`), each with the conventions' bucket boundaries:

- `gen_ai_server_request_duration_seconds`: every chat completion, completion and
  Responses request that named a configured model, from its arrival until its reply
  ended (a stream's last byte), labelled `error_type` when it failed (the code its client
  was told, else the error's type; `client_closed` for a client that left: the step's
  `error.type` in the traces);
- `gen_ai_server_time_to_first_token_seconds`: a successful request's time to its first
  event from the model (the same measure as `vllm:time_to_first_token_seconds`);
- `gen_ai_server_time_per_output_token_seconds`: a successful request's
  (duration - time to first token) / (output tokens - 1), only with 2 output tokens or
  more (the conventions: the rest of the duration over the tokens after the first).

Every series is labelled `tenant` (a tenant's key sees only its own), then
`gen_ai_operation_name` (`chat`, `text_completion`: as the spans name it),
`gen_ai_provider_name` (the spans' provider) and `gen_ai_request_model` (the configured
model's name, never a client's string).

With OTLP export on (docs/tracing.md, "OpenTelemetry") the same observations go to
OpenTelemetry histograms too (`GenAiInstruments`, held by the app's `GenAiRegistry` as
`genai_otel`, None while OTLP is off): the conventions' names (`gen_ai.server.request.duration`,
`gen_ai.server.time_to_first_token`, `gen_ai.server.time_per_output_token`), unit `s`, the
same bucket boundaries (the instruments' advisory), attributes `gen_ai.operation.name`,
`gen_ai.provider.name`, `gen_ai.request.model`, `error.type` and `stepahead.tenant`.

Invariant: recording is `Registry.observe` calls, dict updates on the event loop (no
locks, no I/O), as every other series of gateway/metrics.py, and with OTLP on the same
values in the same calls (`_observe`, the one place both are recorded) to the SDK's
in-memory aggregation (its own short lock; exports run on its reader's thread).
"""
from __future__ import annotations

from dataclasses import dataclass

from opentelemetry.metrics import Histogram as OtelHistogram
from opentelemetry.metrics import Meter

from agents_trace import semconv as sc
from gateway.errors import ApiError
from gateway.metrics import Labels, Registry

REQUEST_DURATION = "gen_ai_server_request_duration_seconds"
TIME_TO_FIRST_TOKEN = "gen_ai_server_time_to_first_token_seconds"
TIME_PER_OUTPUT_TOKEN = "gen_ai_server_time_per_output_token_seconds"

REQUEST_DURATION_BUCKETS_S = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48,
                              40.96, 81.92)
TIME_TO_FIRST_TOKEN_BUCKETS_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                                 2.5, 5.0, 7.5, 10.0)
TIME_PER_OUTPUT_TOKEN_BUCKETS_S = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)

BUCKETS_S = {REQUEST_DURATION: REQUEST_DURATION_BUCKETS_S, TIME_TO_FIRST_TOKEN: TIME_TO_FIRST_TOKEN_BUCKETS_S,
             TIME_PER_OUTPUT_TOKEN: TIME_PER_OUTPUT_TOKEN_BUCKETS_S}
# the conventions' instrument names and descriptions, by Prometheus name
OTEL_INSTRUMENTS = {
    REQUEST_DURATION: ("gen_ai.server.request.duration",
                       "Generative AI server request duration such as time-to-last byte or last output token."),
    TIME_TO_FIRST_TOKEN: ("gen_ai.server.time_to_first_token",
                          "Time to generate first token for successful responses."),
    TIME_PER_OUTPUT_TOKEN: ("gen_ai.server.time_per_output_token",
                            "Time per output token generated after the first token for successful responses."),
}
# the Prometheus labels' OpenTelemetry attribute keys
OTEL_ATTRIBUTES = {"tenant": sc.TENANT, "gen_ai_operation_name": sc.OPERATION_NAME,
                   "gen_ai_provider_name": sc.PROVIDER_NAME, "gen_ai_request_model": sc.REQUEST_MODEL,
                   "error_type": sc.ERROR_TYPE}
METER_NAME = "stepahead.gateway"

# the gateway's endpoint names (`stepahead_requests_total`'s `endpoint`) → the conventions' operation
OPERATION_BY_ENDPOINT = {"chat": sc.OP_CHAT, "responses": sc.OP_CHAT, "completions": sc.OP_TEXT_COMPLETION}


@dataclass(frozen=True, slots=True)
class GenAiInstruments:
    """The three histograms as OpenTelemetry instruments of one meter, by Prometheus name."""

    histograms: dict[str, OtelHistogram]

    @classmethod
    def of(cls, meter: Meter) -> GenAiInstruments:
        return cls({name: meter.create_histogram(otel_name, unit="s", description=description,
                                                 explicit_bucket_boundaries_advisory=list(BUCKETS_S[name]))
                    for name, (otel_name, description) in OTEL_INSTRUMENTS.items()})

    def record(self, name: str, labels: Labels, value: float) -> None:
        """In memory: the SDK adds `value` to the series of these labels' attributes."""
        self.histograms[name].record(value, {OTEL_ATTRIBUTES[label]: text for label, text in labels})


@dataclass(slots=True)
class GenAiRegistry(Registry):
    """The app's `Registry`, holding the GenAI histograms' OpenTelemetry instruments while
    OTLP export is on (`genai_otel`, set at the start; None: `/metrics` only)."""

    genai_otel: GenAiInstruments | None = None


def _observe(registry: Registry, name: str, labels: Labels, value: float) -> None:
    registry.observe(name, labels, value, BUCKETS_S[name])
    otel = registry.genai_otel if isinstance(registry, GenAiRegistry) else None
    if otel is not None:
        otel.record(name, labels, value)


def error_type_of(error: ApiError) -> str:
    """The `error_type` of a request that failed with `error`: its code, else its type
    (what `Exchange.fail` records, and the traced step's `error.type`)."""
    return error.code or error.type


def genai_labels(tenant: str, endpoint: str, model: str) -> Labels:
    return (("tenant", tenant), ("gen_ai_operation_name", OPERATION_BY_ENDPOINT.get(endpoint, endpoint)),
            ("gen_ai_provider_name", sc.PROVIDER), ("gen_ai_request_model", model))


def record_server_request(registry: Registry, *, tenant: str, endpoint: str, model: str, duration_s: float,
                          error_type: str | None = None, ttft_s: float | None = None,
                          num_output_tokens: int = 0) -> None:
    """One request's GenAI server histograms: its duration (with `error_type` when it
    failed); and when it succeeded, its time to first token (when one came) and its time
    per output token (when 2 tokens or more came after a known first one)."""
    labels = genai_labels(tenant, endpoint, model)
    if error_type is not None:
        _observe(registry, REQUEST_DURATION, labels + (("error_type", error_type),), duration_s)
        return
    _observe(registry, REQUEST_DURATION, labels, duration_s)
    if ttft_s is None:
        return
    _observe(registry, TIME_TO_FIRST_TOKEN, labels, ttft_s)
    if num_output_tokens > 1:
        _observe(registry, TIME_PER_OUTPUT_TOKEN, labels, max(0.0, duration_s - ttft_s) / (num_output_tokens - 1))


def record_refused_request(registry: Registry, tenant: str, endpoint: str, model: str, duration_s: float,
                           error: ApiError) -> None:
    """A request answered with `error` where it is rendered (a route's `except ApiError`:
    refused before its model ran, such as a prompt too long for its context, or failed in
    `respond`, whose `Exchange` leaves the count to its caller). Only for a configured
    `model` (`model_label`'s "" is none: an unknown model, or a body not read yet)."""
    if model:
        record_server_request(registry, tenant=tenant, endpoint=endpoint, model=model, duration_s=duration_s,
                              error_type=error_type_of(error))
