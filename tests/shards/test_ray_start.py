"""Starting the Ray transport: its options checked up front, an absent cluster refused at
once, no address a new local instance, and a stop during `ray.init` prompt."""
from __future__ import annotations

import asyncio
import re
import socket
import subprocess
import sys
import threading
import time

import pytest

from shards.engine import LocalEngine
from shards.engine_options import EngineOptionError
import shards.ray_transport
from shards.ray_transport import RayTransport
from shards.transport import StartCancelled


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]   # nothing listens once it is closed


@pytest.mark.parametrize("options, message", [
    ({"bogus": 1}, "unknown Ray transport option 'bogus'; known: address, namespace"),
    ({"start_method": "spawn"}, "unknown Ray transport option 'start_method'"),
    ({"num_cpus_per_worker": -1}, "num_cpus_per_worker must be a number >= 0 (and finite), not -1"),
    ({"num_cpus_per_worker": "abc"}, "num_cpus_per_worker must be a number >= 0 (and finite), not 'abc'"),
    ({"num_gpus_per_worker": True}, "num_gpus_per_worker must be a number >= 0"),
    ({"namespace": 5}, "namespace must be a non-empty string, not 5"),
    ({"address": "not a url at all"}, 'address must be "local", "auto", "HOST:PORT" or "ray://HOST[:PORT]"'),
    ({"address": "10.0.0.1:notaport"}, "address must be"),
    ({"address": 6379}, "address must be a string, not 6379"),
])
def test_bad_ray_transport_options_are_one_engine_option_error(options, message):
    with pytest.raises(EngineOptionError, match=re.escape(message)):
        LocalEngine.check_options({"transport": "ray", "transport_options": options})


def test_good_ray_transport_options_pass():
    for address in ("auto", "local", "10.0.0.1:6379", "head.example:6379", "ray://head:10001", "ray://head",
                    "[::1]:6379"):
        assert shards.ray_transport.address_problem(address) is None, address
    LocalEngine.check_options({"transport": "ray", "transport_options": {
        "address": "ray://head:10001", "namespace": "x", "num_cpus_per_worker": 0.5, "num_gpus_per_worker": 0}})


def test_an_address_nothing_answers_fails_in_seconds_not_minutes():
    """In a child: ray.init would retry the absent GCS for many minutes, beyond any
    cancellation (on the old code the child is killed at the timeout)."""
    pytest.importorskip("ray", reason="ray is not installed (pip install ray): Ray transport untested")
    port = _closed_port()
    code = ("import sys, time\n"
            "from shards.ray_transport import RayTransport\n"
            f"t = RayTransport(address='127.0.0.1:{port}')\n"
            "try:\n"
            "    t.connect()\n"
            "except ConnectionError as exc:\n"
            "    print('REFUSED', exc)\n")
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("the start still waited for the absent cluster after 60 s")
    assert f"REFUSED no Ray cluster answers at 127.0.0.1:{port}: " in done.stdout, done.stdout + done.stderr


def _recording_ray(monkeypatch):
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install ray): Ray transport untested")
    calls = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kwargs: calls.append(("init", kwargs)))
    monkeypatch.setattr(ray, "shutdown", lambda: calls.append(("shutdown", {})))
    return calls


def test_no_address_starts_a_new_local_instance_never_a_recorded_cluster(monkeypatch):
    calls = _recording_ray(monkeypatch)
    transport = RayTransport()
    transport.connect()
    transport.close()
    assert calls[0][0] == "init" and calls[0][1]["address"] == "local"
    assert calls[1] == ("shutdown", {})


def test_auto_with_a_dead_recorded_cluster_fails_at_once(monkeypatch):
    calls = _recording_ray(monkeypatch)
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{_closed_port()}")   # "auto" reads it first
    transport = RayTransport(address="auto")
    with pytest.raises(ConnectionError, match="no Ray cluster answers at 127.0.0.1:.*address 'auto'"):
        transport.connect()
    assert calls == []


def test_a_stop_while_ray_init_hangs_returns_at_once(monkeypatch):
    """`ray.init` cannot be interrupted: the start stops without waiting for it, and Ray
    is shut down once it returns."""
    calls = _recording_ray(monkeypatch)
    import ray

    release = threading.Event()

    def hanging_init(**kwargs):
        calls.append(("init", kwargs))
        release.wait(30)

    monkeypatch.setattr(ray, "init", hanging_init)
    engine = LocalEngine("tiny", num_workers=1, transport="ray", threads_per_worker=1)

    async def start_then_cancel():
        start = asyncio.ensure_future(engine.start())
        deadline = time.monotonic() + 60
        while not calls:
            assert time.monotonic() < deadline and not start.done()
            await asyncio.sleep(0.02)
        engine.cancel_start()
        began = time.monotonic()
        with pytest.raises(StartCancelled):
            await asyncio.wait_for(start, 5)
        return time.monotonic() - began

    try:
        took = asyncio.run(start_then_cancel())
    finally:
        release.set()
    assert took < 2.0
    deadline = time.monotonic() + 10
    while ("shutdown", {}) not in calls:
        assert time.monotonic() < deadline, "Ray was not shut down once ray.init returned"
        time.sleep(0.02)
