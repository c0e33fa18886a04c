"""The Ray channel's reader reads everything an actor sent before its serve loop ended (no
Ray cluster: a stand-in actor whose calls answer at once, `ray.get` passing them through)."""
from __future__ import annotations

import pytest

from shards.protocol import WorkerFailed
from shards.ray_transport import RayChannel

ray = pytest.importorskip("ray")


class _Call:
    def __init__(self, fn):
        self.remote = fn


class _ActorThatFailsToLoad:
    """Its serve loop sends WorkerFailed just after the reader's first empty poll, then ends:
    a failed load racing the reader's `is_serving` question (QA123)."""

    def __init__(self) -> None:
        self.outbox: list = []
        self.serving = True
        self.poll = _Call(self._poll)
        self.is_serving = _Call(lambda: self.serving)

    def _poll(self, wait_s: float) -> list:
        sent, self.outbox = self.outbox, []
        if not sent and self.serving:
            self.outbox.append(WorkerFailed("w0", "ModelLoadError: damaged weights"))
            self.serving = False
        return sent


def test_a_failed_load_sent_as_the_serve_loop_ends_is_read_before_the_exit(monkeypatch):
    monkeypatch.setattr(ray, "get", lambda answer: answer)
    heard: list = []
    channel = object.__new__(RayChannel)
    channel.worker_id, channel.incarnation, channel._node_id = "w0", 3, None
    channel._actor, channel._stopping, channel._alive = _ActorThatFailsToLoad(), False, True
    channel._on_message = lambda worker_id, incarnation, message: heard.append((incarnation, message))
    channel._on_exit = lambda worker_id, incarnation, reason: heard.append((incarnation, reason))
    channel._wait_placed = lambda: None
    channel._read()
    assert heard == [(3, WorkerFailed("w0", "ModelLoadError: damaged weights")), (3, "ended its serve loop")]
    assert not channel.is_alive()
