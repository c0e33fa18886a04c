"""Messages of a shared-prefix transfer between two workers, through the engine: the
holder exports the blocks (`ExportPrefix` -> `PrefixExported`), the worker a request goes
to imports them (`ImportPrefix` -> `PrefixImported`) just before that request.

Like every message in shards/protocol.py, plain slots dataclasses of builtins
(picklable across processes and Ray); a segment named in a `PrefixExported` is imported
or unlinked by the engine, never lost (shards/dispatcher.py).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ExportPrefix:
    """Copy the HOT cached leading blocks of `token_ids` (at most `max_blocks`), from
    `first_block` on (the importer holds those before it), into a new shared-memory
    segment — or, `inline`, into bytes carried by the answer (workers on other machines) —
    and answer with PrefixExported."""

    transfer_id: str
    tenant: str
    token_ids: tuple[int, ...]
    max_blocks: int
    inline: bool = False
    first_block: int = 0


@dataclass(slots=True)
class PrefixExported:
    """`shm_name` (or `payload`, inline) holds `num_blocks` blocks, the prompt's blocks
    `first_block` on (None / 0: nothing was cached any more)."""

    worker_id: str
    transfer_id: str
    shm_name: str | None
    num_blocks: int
    elapsed_s: float
    payload: bytes | None = None
    first_block: int = 0

    @property
    def has_blocks(self) -> bool:
        return self.num_blocks > 0 and (self.shm_name is not None or self.payload is not None)


@dataclass(frozen=True, slots=True)
class ImportPrefix:
    """Store the `num_blocks` blocks in `shm_name` (then unlink the segment), or in
    `payload` when they came inline, as the cached blocks `first_block` on of
    `token_ids`, after the ones this worker holds. Sent just before the request that
    needs them."""

    transfer_id: str
    tenant: str
    session: str | None
    token_ids: tuple[int, ...]
    shm_name: str | None
    num_blocks: int
    payload: bytes | None = None
    first_block: int = 0


@dataclass(slots=True)
class PrefixImported:
    worker_id: str
    transfer_id: str
    num_blocks: int
    elapsed_s: float
