"""Each metric family's Prometheus type and help text, as `/metrics` prints them
(`gateway.metrics.Registry.render_snapshot`); a family not listed here is `untyped`, its
help its name.
"""
from __future__ import annotations

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
    "gen_ai_server_request_duration_seconds": (
        "histogram", "GenAI server request duration (OpenTelemetry gen_ai.server.request.duration): arrival to the "
                     "reply's end, error_type on a failure."),
    "gen_ai_server_time_to_first_token_seconds": (
        "histogram", "Time to the model's first token for successful responses (OpenTelemetry "
                     "gen_ai.server.time_to_first_token)."),
    "gen_ai_server_time_per_output_token_seconds": (
        "histogram", "Time per output token after the first for successful responses of 2 tokens or more "
                     "(OpenTelemetry gen_ai.server.time_per_output_token)."),
    "stepahead_rejected_total": (
        "counter", "Requests refused by tenant limits (the model's per-tenant queue too), by error code."),
    "stepahead_prefix_from_previous_tokens_total": (
        "counter", "Prompt tokens the session's previous prompt began with (traced local steps; "
                   "none on a model with prefix caching off)."),
    "stepahead_evicted_prefix_tokens_total": (
        "counter", "Of the prompt tokens the session's previous prompt began with "
                   "(stepahead_prefix_from_previous_tokens_total), those no longer cached when the step came: "
                   "evicted while the session was away."),
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
        "counter", "Worker fields that count since the worker started (0 again after a restart; num_restarts "
                   "counts since the engine started): decode passes, tokens, evictions, the KV policy's pins and "
                   "prefetches."),
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
        "counter", "Trace writer failures by kind (calls, not steps): store (a failed write: its steps count in "
        "stepahead_trace_store_dropped_steps_total; or upkeep), subscriber, forecaster."),
    "stepahead_trace_store_dropped_steps_total": (
        "counter", "Steps the trace writer handled but could not store (a failed write, or steps held while the "
        "store was locked past the bound or at the stop)."),
    "stepahead_trace_store_busy_total": (
        "counter", "Trace store tries that found it locked by another connection past the busy timeout "
        "(the steps held and tried again)."),
    "stepahead_trace_store_busy_episodes_total": (
        "counter", "Times the trace writer began holding steps because another connection kept the store locked."),
    "stepahead_trace_held_steps": (
        "gauge", "Steps the trace writer holds now, waiting for another connection's lock on the store."),
    "stepahead_trace_stores_set_aside_total": (
        "counter", "Trace stores found damaged, set aside and started anew."),
    "stepahead_response_archive_errors_total": (
        "counter", "Stored-response archive reads and writes that failed (memory served instead)."),
    "stepahead_config_reloads_total": (
        "counter", "SIGHUP reloads of the config file since the start, by outcome (applied, refused: the running "
                   "config kept)."),
    "stepahead_config_last_reload_success_timestamp_seconds": (
        "gauge", "When the config in force was loaded (Unix seconds): the last applied reload's time, else the "
                 "start's."),
    "stepahead_forecaster_checkpoints_total": (
        "counter", "Saves of the forecasters' learned state to disk, by outcome (saved, failed)."),
}
