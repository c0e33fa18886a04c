"""Shared fixtures: the tiny offline model, built once per test session."""
from __future__ import annotations

import atexit
import gc
import logging
import os
import shutil
import sys
import time
from dataclasses import dataclass
import tempfile

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# a config file named in the shell would be served by every `stepahead serve` a test starts (QA87)
os.environ.pop("STEPAHEAD_CONFIG", None)
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Tests never write into the user's data or cache directories.
_TEST_HOME = tempfile.mkdtemp(prefix="stepahead-tests-")
atexit.register(shutil.rmtree, _TEST_HOME, ignore_errors=True)
os.environ.setdefault("STEPAHEAD_TRACE_DB", os.path.join(_TEST_HOME, "traces.sqlite"))
os.environ.setdefault("STEPAHEAD_PREDICTOR_DIR", os.path.join(_TEST_HOME, "predictor"))
os.environ.setdefault("STEPAHEAD_RESPONSES_DB", os.path.join(_TEST_HOME, "responses.sqlite"))
os.environ.setdefault("STEPAHEAD_SPENT_TOKENS", os.path.join(_TEST_HOME, "spent_tokens.json"))
os.environ.setdefault("STEPAHEAD_CACHE_DIR", os.path.join(_TEST_HOME, "cache"))   # probed worker costs


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items) -> None:
    """Under `--dist loadgroup` (scripts/test.sh) a test module whose tests share a
    module-scoped fixture (a served gateway, a browser, a Ray cluster) runs in one process:
    split over two, each would build the fixture again. Modules marked with a group of
    their own keep it. Runs first: xdist reads the marks in a hook of its own."""
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue
        fixture_defs = item._fixtureinfo.name2fixturedefs.values()
        if any(definition.scope == "module" for definitions in fixture_defs for definition in definitions):
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))


def pytest_collection_finish(session) -> None:
    """Move everything collection created (every test module, and what they import) out of
    the garbage collector's reach. Tests that serve a gateway in this process and time its
    gaps (tool runs of 0.4 s, within 0.3 s) otherwise see full collections of that heap
    stall the server thread and the client together."""
    began_s = time.perf_counter()
    gc.collect()
    gc.freeze()
    print(f"\n(gc: froze {gc.get_freeze_count()} objects in {time.perf_counter() - began_s:.2f} s)", file=sys.stderr)


@pytest.fixture(autouse=True)
def log_handlers_outlive_captures():
    """A logging handler made during a test that captured output (capsys, capfd) writes to
    that capture's stream, closed once the test ends: uvicorn's (every `uvicorn.Config`
    configures them, `stepahead serve` in this process too) and torch's (at its first
    import) are kept by their loggers, and a later record through one, a served gateway's
    warning in another test, printed '--- Logging error ---' and a traceback on that
    test's stderr instead. After each test (this fixture is set up first, so torn down
    after the captures) such a handler writes to the streams the suite captures again."""
    yield
    repoint_closed_log_streams()


def repoint_closed_log_streams() -> None:
    """Every logging stream handler whose stream is closed writes to the current
    sys.stderr from now on (uvicorn's access log: sys.stdout, where uvicorn puts it)."""
    manager = logging.Logger.manager
    loggers = [logging.getLogger(), *(lg for lg in list(manager.loggerDict.values()) if isinstance(lg, logging.Logger))]
    for logger in loggers:
        for handler in logger.handlers:
            if isinstance(handler, logging.StreamHandler) and getattr(handler.stream, "closed", False):
                handler.acquire()   # not `setStream`: it flushes the old stream, which is closed
                try:
                    handler.stream = sys.stdout if logger.name == "uvicorn.access" else sys.stderr
                finally:
                    handler.release()


@pytest.fixture(scope="session")
def tiny_loaded():
    from shards.model_loader import load_model

    return load_model("tiny")


@dataclass(slots=True)
class ServedGateway:
    """A gateway app served by a test uvicorn server."""

    server: object
    app: object

    @property
    def base_url(self) -> str:
        return self.server.base_url

    @property
    def state(self):
        return self.app.state.gateway


TINY_GATEWAY_KEYS = {"tenant0": "sk-tiny-tenant0", "tenant1": "sk-tiny-tenant1", "tenant2": "sk-tiny-tenant2"}


@pytest.fixture(scope="session")
def tiny_gateway():
    """A real gateway (uvicorn on 127.0.0.1) serving the tiny model on two workers, with
    three tenants whose keys are in TINY_GATEWAY_KEYS. For replay, examples and e2e tests."""
    from gateway.app import build_app
    from gateway.config import key_digest, parse_config
    from tests.gateway.serving import start_server

    config = parse_config({
        "models": [{"name": "tiny", "kind": "local", "path": "tiny", "num_workers": 2,
                    "engine": {"num_hot_blocks": 512, "threads_per_worker": 1}}],
        "tenants": [{"name": name, "api_key_sha256": [key_digest(key)]}
                    for name, key in TINY_GATEWAY_KEYS.items()],
    })
    app = build_app(config)
    server = start_server(app, startup_timeout_s=300)
    yield ServedGateway(server, app)
    server.stop()


@pytest.fixture
def umask_022():
    """The usual umask, which gives new files 0644 and directories 0755."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)
