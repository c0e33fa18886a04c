"""Checking a local engine's options (`[models.engine]`) before anything starts.

A wrong name, type or range must be one clear line when the gateway starts, not a
worker's traceback after the model has loaded. `check_engine_options` knows the names
`LocalEngine` accepts (its keyword parameters, passed in as `known`) and the type and
lower bound of each scalar one; options it has no rule for (mappings, device strings)
are checked where they are used.
"""
from __future__ import annotations

from collections.abc import Collection, Mapping

from cache.policies import POLICY_NAMES
from shards.local_transport import START_METHODS
from shards.prefill_order import PREFILL_ORDERS
from shards.route_records import ROUTING_POLICIES
from shards.transport import TRANSPORTS

# option -> smallest allowed value
INTEGER_OPTIONS = {"num_hot_blocks": 1, "num_host_blocks": 0, "block_size": 1, "max_running": 1,
                   "decode_batch": 1, "threads_per_worker": 1, "max_queued_per_tenant": 1,
                   "max_queued_requests": 1, "max_outstanding_per_worker": 1, "prefill_chunk_tokens": 1}
NUMBER_OPTIONS = {"max_queue_wait_s": 0.0, "imbalance_threshold_tokens": 0.0,
                  "health_timeout_s": 0.0, "ping_interval_s": 0.0, "min_p_return": 0.0,
                  "max_decode_stall_s": 0.0}
BOOLEAN_OPTIONS = ("prefix_transfer", "tenant_homes", "prefix_caching", "decodes_ride_chunks",
                   "reuse_probed_costs", "flex_blocks_evicted_first")
CHOICE_OPTIONS = {"policy": POLICY_NAMES, "routing": ROUTING_POLICIES, "transport": TRANSPORTS,
                  "prefill_order": PREFILL_ORDERS}


LOCAL_TRANSPORT_CHOICES = {"start_method": START_METHODS}   # transport_options of the local transport


class EngineOptionError(ValueError):
    """An engine option that cannot work; the message names it."""


def check_engine_options(options: Mapping[str, object], known: Collection[str]) -> None:
    """Raise EngineOptionError for the first option that is unknown, of the wrong type or
    out of range."""
    for name, value in options.items():
        if name not in known:
            raise EngineOptionError(f"unknown engine option {name!r}; known: {', '.join(sorted(known))}")
        if value is None:
            continue
        if name in INTEGER_OPTIONS:
            if not isinstance(value, int) or isinstance(value, bool) or value < INTEGER_OPTIONS[name]:
                raise EngineOptionError(
                    f"engine option {name} must be an integer >= {INTEGER_OPTIONS[name]}, not {value!r}")
        elif name in NUMBER_OPTIONS:
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value < NUMBER_OPTIONS[name]:
                raise EngineOptionError(
                    f"engine option {name} must be a number >= {NUMBER_OPTIONS[name]:g}, not {value!r}")
            if name == "min_p_return" and value > 1:
                raise EngineOptionError(f"engine option min_p_return must be at most 1, not {value!r}")
        elif name in BOOLEAN_OPTIONS:
            if not isinstance(value, bool):
                raise EngineOptionError(f"engine option {name} must be true or false, not {value!r}")
        elif name in CHOICE_OPTIONS and value not in CHOICE_OPTIONS[name]:
            raise EngineOptionError(
                f"engine option {name} must be one of {', '.join(CHOICE_OPTIONS[name])}, not {value!r}")
    if options.get("transport") in (None, "local"):
        _check_local_transport_options(options.get("transport_options") or {})


def _check_local_transport_options(options: Mapping[str, object]) -> None:
    """The local transport's options: each known, each one of its choices (Ray's
    options are checked by Ray)."""
    for name, value in dict(options).items():
        if name not in LOCAL_TRANSPORT_CHOICES:
            raise EngineOptionError(f"unknown local transport option {name!r}; known: "
                                    f"{', '.join(LOCAL_TRANSPORT_CHOICES)}")
        if value not in LOCAL_TRANSPORT_CHOICES[name]:
            raise EngineOptionError(f"transport option {name} must be one of "
                                    f"{', '.join(LOCAL_TRANSPORT_CHOICES[name])}, not {value!r}")
