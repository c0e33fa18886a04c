"""Shared-prefix copies under way between workers, each for one request (`shards.dispatcher`).

A transfer is held here from its ExportPrefix until exactly one of: its PrefixExported
arrives (`finish`), its deadline passes or a worker at either end is fenced (`abandon_*`,
counted in `stats.num_transfers_abandoned`), or its request is cancelled (`forget_request`).
What to do with the request then is the dispatcher's. No I/O.
"""
from __future__ import annotations

import itertools

from shards.dispatch_records import DispatchStats, Transfer


class PrefixTransfers:
    def __init__(self, stats: DispatchStats) -> None:
        self._by_id: dict[str, Transfer] = {}
        self._ids = itertools.count()
        self._stats = stats

    def start(self, request_id: str, src: str, dst: str, deadline_s: float) -> str:
        """Hold a new transfer for `request_id` from `src` to `dst`; its id."""
        transfer_id = f"xfer-{next(self._ids)}"
        self._by_id[transfer_id] = Transfer(request_id, src, dst, deadline_s)
        return transfer_id

    def finish(self, transfer_id: str) -> Transfer | None:
        """The export arrived: the transfer, if it was still held."""
        return self._by_id.pop(transfer_id, None)

    def abandon_through(self, worker_id: str) -> list[Transfer]:
        """Abandon every transfer from or to `worker_id`; those whose request waits on
        another worker (the copy's destination), which go on without the copy."""
        waiting_elsewhere = []
        for transfer_id, transfer in list(self._by_id.items()):
            if worker_id not in (transfer.src, transfer.dst):
                continue
            self._abandon(transfer_id)
            if transfer.dst != worker_id:
                waiting_elsewhere.append(transfer)
        return waiting_elsewhere

    def abandon_expired(self, now_s: float) -> list[Transfer]:
        """Abandon the transfers past their deadline; their requests go on without them."""
        expired = [(transfer_id, t) for transfer_id, t in self._by_id.items() if now_s > t.deadline_s]
        for transfer_id, _ in expired:
            self._abandon(transfer_id)
        return [t for _, t in expired]

    def forget_request(self, request_id: str) -> None:
        """The request was cancelled: drop its transfers (a late PrefixExported is then unlinked)."""
        for transfer_id in [t for t, x in self._by_id.items() if x.request_id == request_id]:
            del self._by_id[transfer_id]

    def _abandon(self, transfer_id: str) -> None:
        del self._by_id[transfer_id]
        self._stats.num_transfers_abandoned += 1
