"""A Ray worker actor runs, and so counts as placed (its `where` answers), before the
worker's heavy imports: the actor process imports no torch to unpickle its class or its
`WorkerConfig`, and the constructor returns at once, the serve thread importing the
worker. Else, for the 10-40 s those imports take on a loaded machine, the CPUs of the
gateway's own placed actors read as "held by other actors" (QA123 D2). No Ray instance
is started: the actor body runs in this process, its worker import held or failed."""
from __future__ import annotations

import importlib.abc
import importlib.util
import pickle
import subprocess
import sys
import threading

import pytest

import shards
from shards.protocol import WorkerFailed
from shards.ray_actor import ActorBody
from shards.worker_config import WorkerConfig

SERVICE = "shards.worker_service"
CONFIG = WorkerConfig(model="tiny", num_threads=1)


def test_unpickling_the_actor_class_and_its_config_imports_no_torch():
    """What the actor process does before its constructor runs: both go by reference,
    WorkerConfig to the light module `shards.worker_config` (`shards.worker` re-exports it)."""
    assert WorkerConfig.__module__ == "shards.worker_config"
    sent = pickle.dumps((ActorBody, CONFIG))
    assert b"shards.worker_config" in sent and b"shards.worker\x94" not in sent
    check = ("import pickle, sys; cls, config = pickle.loads(sys.stdin.buffer.read()); "
             "print(cls.__name__, config.model, 'torch' in sys.modules)")
    run = subprocess.run([sys.executable, "-c", check], input=sent, capture_output=True, timeout=60)
    assert run.returncode == 0, run.stderr.decode()
    assert run.stdout.decode().split() == ["ActorBody", "tiny", "False"]


class _HeldWorkerImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Stands in for `shards.worker_service`: its import waits for `release` (torch and
    transformers loading), then gives a `serve` that says it ran; or raises `error`."""

    def __init__(self, error: Exception | None = None) -> None:
        self.release = threading.Event()
        self.error = error

    def find_spec(self, name, path=None, target=None):
        return importlib.util.spec_from_loader(name, self) if name == SERVICE else None

    def create_module(self, spec):
        return None

    def exec_module(self, module) -> None:
        if self.error is not None:
            raise self.error
        self.release.wait(30)

        def serve(worker_id, config, receive, emit) -> None:
            emit(("served", worker_id, config.model))

        module.serve = serve


@pytest.fixture
def worker_import(monkeypatch):
    """Installs a `_HeldWorkerImport` for the next import of shards.worker_service; the real
    module (when this process had imported it) is back afterwards, the stand-in gone."""
    original = sys.modules.pop(SERVICE, None)
    had_attribute = hasattr(shards, "worker_service")
    original_attribute = getattr(shards, "worker_service", None)

    def install(finder: _HeldWorkerImport) -> _HeldWorkerImport:
        monkeypatch.setattr(sys, "meta_path", [finder, *sys.meta_path])
        return finder

    yield install
    monkeypatch.undo()
    sys.modules.pop(SERVICE, None)
    if original is not None:
        sys.modules[SERVICE] = original
    if had_attribute:
        shards.worker_service = original_attribute
    elif hasattr(shards, "worker_service"):
        del shards.worker_service


def _construct(bodies: list) -> threading.Thread:
    thread = threading.Thread(target=lambda: bodies.append(ActorBody("w0", CONFIG)), daemon=True)
    thread.start()
    return thread


def test_the_actor_constructor_returns_while_the_worker_is_still_importing(worker_import):
    finder = worker_import(_HeldWorkerImport())
    bodies: list = []
    try:
        _construct(bodies).join(10)
        assert bodies, "the constructor waited for the worker's imports"
        body = bodies[0]
        assert body.is_serving() and body.poll(0.0) == []   # placed and answering, still importing
    finally:
        finder.release.set()
    assert body.poll(10.0) == [("served", "w0", "tiny")]
    body._thread.join(10)
    assert not body.is_serving()


def test_a_worker_that_cannot_be_imported_fails_its_start_with_the_reason(worker_import):
    """As a failed model load does: WorkerFailed (the fence reason, the log line), then the
    serve loop ends; the actor itself stays up to answer the reader."""
    worker_import(_HeldWorkerImport(ImportError("No module named 'torch'")))
    bodies: list = []
    _construct(bodies).join(10)
    assert bodies, "the constructor raised"
    body = bodies[0]
    assert body.poll(10.0) == [WorkerFailed("w0", "ImportError: No module named 'torch'")]
    body._thread.join(10)
    assert not body.is_serving()
