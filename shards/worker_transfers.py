"""A worker's side of copying a shared prefix between workers (`shards.kv_transfer`).

The router asks the worker holding a prefix to export it (`ExportPrefix`) and the worker
a request goes to to import it (`ImportPrefix`). Each answer reports what was copied and
how long it took. A failed copy is logged (through the worker's `RepeatedFailures`: a
copy path that fails every time, a broken device, logs once a minute, not per request)
and answered with 0 blocks (the request then recomputes the prefix), never with an
exception out of the worker loop; a failed import leaves no block of it matchable
(`shards.kv_transfer`).
"""
from __future__ import annotations

import time

from cache.repeated_failures import RepeatedFailures
from shards.transfer_messages import ExportPrefix, ImportPrefix, PrefixExported, PrefixImported


def export_prefix_for(runner, worker_id: str, message: ExportPrefix,
                      failures: RepeatedFailures) -> PrefixExported:
    """Export the cached prefix `message` names: through shared memory, or as bytes."""
    from shards.kv_transfer import export_prefix, export_prefix_bytes

    started = time.perf_counter()
    name = payload = None
    try:
        if message.inline:
            payload, num_blocks = export_prefix_bytes(runner, message.tenant, list(message.token_ids),
                                                      message.max_blocks, message.first_block)
        else:
            name, num_blocks = export_prefix(runner, message.tenant, list(message.token_ids), message.max_blocks,
                                             message.first_block)
    except Exception:
        failures.log("export", "worker %s: a prefix export failed", worker_id)
        name, payload, num_blocks = None, None, 0
    return PrefixExported(worker_id, message.transfer_id, name, num_blocks, time.perf_counter() - started, payload,
                          message.first_block)


def import_prefix_for(runner, worker_id: str, message: ImportPrefix,
                      failures: RepeatedFailures) -> PrefixImported:
    """Store the prefix another worker exported into this worker's cache."""
    from shards.kv_transfer import import_prefix, import_prefix_bytes

    started = time.perf_counter()
    try:
        if message.payload is not None:
            num_blocks = import_prefix_bytes(runner, message.tenant, message.session, list(message.token_ids),
                                             message.payload, message.num_blocks, message.first_block)
        else:
            num_blocks = import_prefix(runner, message.tenant, message.session, list(message.token_ids),
                                       message.shm_name, message.num_blocks, message.first_block)
    except Exception:
        failures.log("import", "worker %s: a prefix import failed", worker_id)
        num_blocks = 0
    return PrefixImported(worker_id, message.transfer_id, num_blocks, time.perf_counter() - started)
