"""Checking a local engine's options (`[models.engine]`) before anything starts.

A wrong name, type or range must be one clear line when the gateway starts, not a
worker's traceback after the model has loaded. `check_engine_options` knows the names
`LocalEngine` accepts (its keyword parameters, passed in as `known`) and the type and
bounds of each scalar one (numbers finite: a NaN or inf bound never works); the tables
(`transport_options`, `tenant_weights`, `policy_options`) are checked by shape, entry by
entry, by `check_engine_tables`, which the config's parser runs too (a table given as a
plain value must be a bad config, at the start and at a reload); `policy_options` also
against the policy named (`check_policy_options`: built as a worker builds it). Options
it has no rule for (device strings) are checked where they are used.
"""
from __future__ import annotations

import math
from collections.abc import Collection, Mapping

from cache.error_text import did_you_mean
from cache.policies import POLICY_NAMES, make_policy
from shards.local_transport import START_METHODS
from shards.prefill_order import PREFILL_ORDERS
from shards.route_records import ROUTING_POLICIES
from shards.transport import TRANSPORTS

# option -> smallest allowed value
INTEGER_OPTIONS = {"num_hot_blocks": 1, "num_host_blocks": 0, "block_size": 1, "max_running": 1,
                   "decode_batch": 1, "threads_per_worker": 1, "max_queued_per_tenant": 1,
                   "max_queued_requests": 1, "max_outstanding_per_worker": 1, "prefill_chunk_tokens": 1}
# option -> largest allowed value. A worker's torch takes a 32-bit thread count (a larger
# one is an overflow after the model loaded) and no CPU has use for more threads per
# worker than this; the gateway's own CPU count is no bound: Ray workers run on other nodes
INTEGER_MAXIMA = {"threads_per_worker": 1024}
# option -> smallest allowed value; each must be finite
NUMBER_OPTIONS = {"max_queue_wait_s": 0.0, "imbalance_threshold_tokens": 0.0,
                  "health_timeout_s": 0.0, "ping_interval_s": 0.0, "min_p_return": 0.0,
                  "max_decode_stall_s": 0.0}
# ... and these must be above it: a worker silent 0 s is fenced at once, pings every 0 s spin
ABOVE_BOUND_OPTIONS = ("health_timeout_s", "ping_interval_s")
ENGINE_DEFAULTS_S = {"health_timeout_s": 30.0, "ping_interval_s": 0.5}   # LocalEngine's
BOOLEAN_OPTIONS = ("prefix_transfer", "tenant_homes", "prefix_caching", "decodes_ride_chunks",
                   "reuse_probed_costs", "flex_blocks_evicted_first")
CHOICE_OPTIONS = {"policy": POLICY_NAMES, "routing": ROUTING_POLICIES, "transport": TRANSPORTS,
                  "prefill_order": PREFILL_ORDERS}


LOCAL_TRANSPORT_CHOICES = {"start_method": START_METHODS}   # transport_options of the local transport
RAY_TRANSPORT_OPTIONS = ("address", "namespace", "num_cpus_per_worker", "num_gpus_per_worker")


class EngineOptionError(ValueError):
    """An engine option that cannot work; the message names it."""


class UnknownEngineOptionError(EngineOptionError):
    """An option the engine does not have (`name`), with the nearest of the `known` ones
    when it looks like a typo; a config file's reader words it as its other unknown keys."""

    def __init__(self, name: str, known: Collection[str]) -> None:
        self.name = name
        self.known = tuple(sorted(known))
        super().__init__(f"unknown engine option {name!r}{did_you_mean(name, self.known)} "
                         f"(known: {', '.join(self.known)})")


def check_engine_options(options: Mapping[str, object], known: Collection[str]) -> None:
    """Raise EngineOptionError for the first option that is unknown, of the wrong type or
    out of range."""
    for name, value in options.items():
        if name not in known:
            raise UnknownEngineOptionError(str(name), known)
        if value is None:
            continue
        if name in INTEGER_OPTIONS:
            if not isinstance(value, int) or isinstance(value, bool) or value < INTEGER_OPTIONS[name]:
                raise EngineOptionError(
                    f"engine option {name} must be an integer >= {INTEGER_OPTIONS[name]}, not {value!r}")
            if value > INTEGER_MAXIMA.get(name, value):
                raise EngineOptionError(f"engine option {name} must be at most {INTEGER_MAXIMA[name]}, "
                                        f"not {value!r}")
        elif name in NUMBER_OPTIONS:
            above = name in ABOVE_BOUND_OPTIONS
            if (not _is_number(value) or value < NUMBER_OPTIONS[name]
                    or (above and value == NUMBER_OPTIONS[name])):
                raise EngineOptionError(f"engine option {name} must be a number {'>' if above else '>='} "
                                        f"{NUMBER_OPTIONS[name]:g} (and finite), not {value!r}")
            if name == "min_p_return" and value > 1:
                raise EngineOptionError(f"engine option min_p_return must be at most 1, not {value!r}")
        elif name in BOOLEAN_OPTIONS:
            if not isinstance(value, bool):
                raise EngineOptionError(f"engine option {name} must be true or false, not {value!r}")
        elif name in CHOICE_OPTIONS and value not in CHOICE_OPTIONS[name]:
            raise EngineOptionError(
                f"engine option {name} must be one of {', '.join(CHOICE_OPTIONS[name])}, not {value!r}")
    timeout, interval = (options.get(name) or ENGINE_DEFAULTS_S[name] for name in ABOVE_BOUND_OPTIONS)
    if timeout <= interval:
        raise EngineOptionError(f"engine option health_timeout_s ({timeout:g}) must be longer than "
                                f"ping_interval_s ({interval:g}): every worker would be fenced between pings")
    check_engine_tables(options)
    if options.get("policy") is not None:   # else the caller's default runs, checked once the caller names it
        check_policy_options(str(options["policy"]), options.get("policy_options") or {})
    if options.get("transport") in (None, "local"):
        _check_local_transport_options(options.get("transport_options") or {})
    elif options.get("transport") == "ray":
        _check_ray_transport_options(options.get("transport_options") or {}, str(options.get("device") or "cpu"))


def _is_number(value: object) -> bool:
    """An int or a finite float; never a bool."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


def check_engine_tables(options: Mapping[str, object]) -> None:
    """Raise EngineOptionError when a table option is not a table or holds what it cannot:
    `transport_options` plain values (a string, number or true/false each);
    `tenant_weights` a finite number > 0 per tenant (as a tenant's `weight`);
    `policy_options` plain values, but `static_shares`, a table of fractions in [0, 1]."""
    for name in ("transport_options", "tenant_weights", "policy_options"):
        table = options.get(name)
        if table is not None and not isinstance(table, Mapping):
            raise EngineOptionError(f"engine option {name} must be a table, not {table!r}")
    for key, value in (options.get("transport_options") or {}).items():
        if not isinstance(value, (str, int, float, bool)) or (isinstance(value, float) and not math.isfinite(value)):
            raise EngineOptionError(f"engine option transport_options.{key} must be a string, "
                                    f"a finite number or true/false, not {value!r}")
    for tenant, weight in (options.get("tenant_weights") or {}).items():
        if not _is_number(weight) or weight <= 0:
            raise EngineOptionError(f"engine option tenant_weights.{tenant} must be a finite number > 0, "
                                    f"not {weight!r}")
    for key, value in (options.get("policy_options") or {}).items():
        if key == "static_shares":
            if not isinstance(value, Mapping):
                raise EngineOptionError(f"engine option policy_options.static_shares must be a table "
                                        f"(tenant = fraction of the hot blocks), not {value!r}")
            for tenant, share in value.items():
                if not _is_number(share) or not 0 <= share <= 1:
                    raise EngineOptionError(f"engine option policy_options.static_shares.{tenant} must be "
                                            f"a number in [0, 1], not {share!r}")
        elif not isinstance(value, (str, int, float, bool)) or (isinstance(value, float)
                                                               and not math.isfinite(value)):
            raise EngineOptionError(f"engine option policy_options.{key} must be a string, a finite "
                                    f"number or true/false, not {value!r}")


def check_policy_options(policy: str, policy_options: Mapping[str, object]) -> None:
    """Raise EngineOptionError when `policy` refuses `policy_options` (a knob it does not
    have, one out of its range, options for a policy that takes none): the policy is built
    as a worker builds it (`cache.policies.make_policy`, a table as sorted pairs), which
    is cheap, so the start and a reload say what the worker would. `check_engine_tables`
    has checked their shape."""
    frozen = {key: tuple(sorted(value.items())) if isinstance(value, Mapping) else value
              for key, value in policy_options.items()}
    try:
        make_policy(policy, **frozen)
    except (ValueError, TypeError) as exc:
        raise EngineOptionError(f"engine option policy_options does not suit policy {policy!r}: {exc}") from None


def _check_local_transport_options(options: Mapping[str, object]) -> None:
    """The local transport's options: each known, each one of its choices.
    `check_engine_tables` has made `options` a table."""
    for name, value in options.items():
        if name not in LOCAL_TRANSPORT_CHOICES:
            raise EngineOptionError(f"unknown local transport option {name!r}; known: "
                                    f"{', '.join(LOCAL_TRANSPORT_CHOICES)}")
        if value not in LOCAL_TRANSPORT_CHOICES[name]:
            raise EngineOptionError(f"transport option {name} must be one of "
                                    f"{', '.join(LOCAL_TRANSPORT_CHOICES[name])}, not {value!r}")


def _check_ray_transport_options(options: Mapping[str, object], device: str) -> None:
    """The Ray transport's options (`shards.ray_transport.RayTransport`): each known, an
    address Ray can parse, a namespace string, reservations finite numbers >= 0; a GPU
    reservation only for a model on CUDA, and `device` the bare "cuda" there (Ray makes
    each actor's GPU its only visible device: "cuda:1" names none; QA222 F1, F2).
    `check_engine_tables` has made `options` a table."""
    from shards.ray_address import address_problem   # not ray_transport: it imports torch (QA123)

    for name, value in options.items():
        if name not in RAY_TRANSPORT_OPTIONS:
            raise EngineOptionError(f"unknown Ray transport option {name!r}; known: "
                                    f"{', '.join(RAY_TRANSPORT_OPTIONS)}")
        if name == "address" and (problem := address_problem(value)) is not None:
            raise EngineOptionError(f"transport option address {problem}")
        if name == "namespace" and (not isinstance(value, str) or not value):
            raise EngineOptionError(f"transport option namespace must be a non-empty string, not {value!r}")
        if name.startswith("num_") and (not _is_number(value) or value < 0):
            raise EngineOptionError(f"transport option {name} must be a number >= 0 (and finite), not {value!r}")
    if device.startswith("cuda:"):
        raise EngineOptionError(f"device {device!r} with the Ray transport: use \"cuda\" (Ray gives each worker "
                                "actor one GPU, its only visible device)")
    if options.get("num_gpus_per_worker") and not device.startswith("cuda"):
        raise EngineOptionError(f"transport option num_gpus_per_worker reserves GPUs for a model on CUDA; this "
                                f"one runs on {device!r}: leave it out, or set device = \"cuda\"")
