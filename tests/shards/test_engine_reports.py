"""The engine's router report: every dispatch count it keeps, abandoned prefix copies among them."""
from __future__ import annotations

import threading

from cache.session_hashes import SessionHashes
from gateway.engine_series import router_gauges
from shards.dispatcher import Dispatcher
from shards.engine_reports import EngineReports
from shards.route_records import RouterConfig
from shards.router import Router


class _Reports(EngineReports):
    """The parts of a `LocalEngine` its router report reads, without workers."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._dispatcher = Dispatcher(Router(RouterConfig()))
        self._session_hashes = SessionHashes(16)


def test_router_stats_count_the_prefix_copies_abandoned_beside_those_done():
    reports = _Reports()
    transfers = reports._dispatcher.transfers
    transfers.start("r1", "w0", "w1", 1.0)
    transfers.start("r2", "w1", "w2", 5.0)
    transfers.abandon_expired(2.0)   # r1's copy ran past its deadline
    transfers.abandon_through("w2")   # r2's: its destination was fenced
    stats = reports.router_stats()
    assert stats["num_transfers_abandoned"] == 2 and stats["num_transfers_done"] == 0
    field = (("model_name", "m"), ("field", "num_transfers_abandoned"))
    assert router_gauges("m", stats)[("stepahead_router_counts_total", field)] == 2.0   # on /metrics
