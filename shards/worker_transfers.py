"""A worker's side of copying a shared prefix between workers (`shards.kv_transfer`).

The router asks the worker holding a prefix to export it (`ExportPrefix`) and the worker
a request goes to to import it (`ImportPrefix`). Each answer reports what was copied and
how long it took. A failed copy is logged and answered with 0 blocks (the request then
recomputes the prefix), never with an exception out of the worker loop.
"""
from __future__ import annotations

import time
import traceback

from shards.transfer_messages import ExportPrefix, ImportPrefix, PrefixExported, PrefixImported


def export_prefix_for(runner, worker_id: str, message: ExportPrefix) -> PrefixExported:
    """Export the cached prefix `message` names: through shared memory, or as bytes."""
    from shards.kv_transfer import export_prefix, export_prefix_bytes

    started = time.perf_counter()
    name = payload = None
    try:
        if message.inline:
            payload, num_blocks = export_prefix_bytes(runner, message.tenant, list(message.token_ids),
                                                      message.max_blocks)
        else:
            name, num_blocks = export_prefix(runner, message.tenant, list(message.token_ids), message.max_blocks)
    except Exception:
        traceback.print_exc()
        name, payload, num_blocks = None, None, 0
    return PrefixExported(worker_id, message.transfer_id, name, num_blocks, time.perf_counter() - started, payload)


def import_prefix_for(runner, worker_id: str, message: ImportPrefix) -> PrefixImported:
    """Store the prefix another worker exported into this worker's cache."""
    from shards.kv_transfer import import_prefix, import_prefix_bytes

    started = time.perf_counter()
    try:
        if message.payload is not None:
            num_blocks = import_prefix_bytes(runner, message.tenant, message.session, list(message.token_ids),
                                             message.payload, message.num_blocks)
        else:
            num_blocks = import_prefix(runner, message.tenant, message.session, list(message.token_ids),
                                       message.shm_name, message.num_blocks)
    except Exception:
        traceback.print_exc()
        num_blocks = 0
    return PrefixImported(worker_id, message.transfer_id, num_blocks, time.perf_counter() - started)
