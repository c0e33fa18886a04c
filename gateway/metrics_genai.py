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

Invariant: recording is `Registry.observe` calls, dict updates on the event loop (no
locks, no I/O), as every other series of gateway/metrics.py.
"""
from __future__ import annotations

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

# the gateway's endpoint names (`stepahead_requests_total`'s `endpoint`) → the conventions' operation
OPERATION_BY_ENDPOINT = {"chat": sc.OP_CHAT, "responses": sc.OP_CHAT, "completions": sc.OP_TEXT_COMPLETION}


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
        registry.observe(REQUEST_DURATION, labels + (("error_type", error_type),), duration_s,
                         REQUEST_DURATION_BUCKETS_S)
        return
    registry.observe(REQUEST_DURATION, labels, duration_s, REQUEST_DURATION_BUCKETS_S)
    if ttft_s is None:
        return
    registry.observe(TIME_TO_FIRST_TOKEN, labels, ttft_s, TIME_TO_FIRST_TOKEN_BUCKETS_S)
    if num_output_tokens > 1:
        registry.observe(TIME_PER_OUTPUT_TOKEN, labels, max(0.0, duration_s - ttft_s) / (num_output_tokens - 1),
                         TIME_PER_OUTPUT_TOKEN_BUCKETS_S)


def record_refused_request(registry: Registry, tenant: str, endpoint: str, model: str, duration_s: float,
                           error: ApiError) -> None:
    """A request answered with `error` where it is rendered (a route's `except ApiError`:
    refused before its model ran, such as a prompt too long for its context, or failed in
    `respond`, whose `Exchange` leaves the count to its caller). Only for a configured
    `model` (`model_label`'s "" is none: an unknown model, or a body not read yet)."""
    if model:
        record_server_request(registry, tenant=tenant, endpoint=endpoint, model=model, duration_s=duration_s,
                              error_type=error_type_of(error))
