"""The engine's stats tables (per worker, per router, the prompt token cache) as
Prometheus series for `/metrics`.

Invariant: an `_info` series is 1 and says what exists by its labels; each number of a
table is a `{prefix}_level` gauge (a level now: `is_worker_level`, `LEVEL_FIELDS`) or a
`{prefix}_counts_total` counter (a count since the worker or model started), labelled
by its `field`.
"""
from __future__ import annotations

from gateway.metrics import Labels


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


LEVEL_FIELDS = frozenset({"ready", "in_flight", "num_running", "num_waiting", "forecasts_followed", "off"})


def is_worker_level(field_name: str) -> bool:
    """A worker's field that is a level now (a gauge), not a count since it started:
    the flags and request counts in `LEVEL_FIELDS`, and blocks held (`*_blocks`: a tier's
    used, free and cached blocks, a tenant's hot, host, pinned and reserved ones), the
    block size (`*bytes_per_block`)."""
    return field_name in LEVEL_FIELDS or field_name.endswith(("_blocks", "bytes_per_block"))


def _field_key(prefix: str, labels: Labels, field_name: str, is_level: bool) -> tuple[str, Labels]:
    """The series of one numeric field of a `{prefix}_info` family's table."""
    return (f"{prefix}_level" if is_level else f"{prefix}_counts_total"), labels + (("field", field_name),)


def worker_gauges(model: str, rows: list[dict]) -> dict[tuple[str, Labels], float]:
    """Series from the engine's per-worker stats rows: `stepahead_worker_info` (1 for each
    worker) and its numbers, at the top level and one level down
    (`tiers.hot.num_used_blocks` → field "hot_num_used_blocks"), as `stepahead_worker_level`
    (gauges) or `stepahead_worker_counts_total` (counters since the worker started:
    `is_worker_level`); the `tenants` table becomes the `stepahead_worker_tenant_*`
    families, with a tenant label.

    Invariant: an `_info` series is 1 and says what exists by its labels; a number is
    never an `_info` series' value."""
    series: dict[tuple[str, Labels], float] = {}

    def put(prefix: str, labels: Labels, field_name: str, number: object) -> None:
        if _is_number(number):
            series[_field_key(prefix, labels, field_name, is_worker_level(field_name))] = float(number)

    for row in rows:
        base = (("model_name", model), ("worker", str(row.get("worker", ""))))
        series[("stepahead_worker_info", base)] = 1.0
        for key, value in row.items():
            if key == "tenants" and isinstance(value, dict):
                for tenant, fields in value.items():
                    tenant_labels = base + (("tenant", str(tenant)),)
                    series[("stepahead_worker_tenant_info", tenant_labels)] = 1.0
                    for field_name, number in (fields or {}).items():
                        put("stepahead_worker_tenant", tenant_labels, field_name, number)
            elif isinstance(value, dict):
                for inner, inner_value in value.items():
                    flat = inner_value if isinstance(inner_value, dict) else {"": inner_value}
                    for leaf, number in flat.items():
                        put("stepahead_worker", base, "_".join(part for part in (inner, leaf) if part), number)
            elif key != "worker":
                put("stepahead_worker", base, key, value)
    return series


def router_gauges(model: str, stats: dict, family: str = "stepahead_router_info") -> dict[tuple[str, Labels], float]:
    """Series from the engine's router stats (or another flat table of a model's counts,
    `family` naming its `_info` family): `family` 1 for the model when it has the table,
    and its numbers, one level of counts by name (`num_routed.reserved` → field
    "num_routed_reserved"), as counters since the start (`{prefix}_counts_total`), but for
    the `LEVEL_FIELDS` (`off`), gauges (`{prefix}_level`)."""
    prefix = family.removesuffix("_info")
    labels = (("model_name", model),)
    series: dict[tuple[str, Labels], float] = {(family, labels): 1.0} if stats else {}
    for key, value in stats.items():
        items = value.items() if isinstance(value, dict) else [("", value)]
        for inner, number in items:
            if _is_number(number):
                field_name = f"{key}_{inner}" if inner else key
                series[_field_key(prefix, labels, field_name, field_name in LEVEL_FIELDS)] = float(number)
    return series
