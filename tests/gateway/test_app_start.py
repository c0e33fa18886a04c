"""The gateway's start: its models start side by side, and a model that fails to start
stops the ones that did, with the failure raised."""
from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gateway.app import start_all
from gateway.start_failure import StartFailed

REPO = Path(__file__).resolve().parents[2]


class SlowBackend:
    def __init__(self, name: str, log: list[str], fail: bool = False) -> None:
        self.name, self.model_id, self.log, self.fail = name, name, log, fail

    async def start(self) -> None:
        self.log.append(f"{self.name} begins")
        await asyncio.sleep(0.05)
        if self.fail:
            raise OSError(f"{self.name} cannot start")
        self.log.append(f"{self.name} ready")


def test_models_start_side_by_side():
    log: list[str] = []
    backends = [SlowBackend("a", log), SlowBackend("b", log), SlowBackend("c", log)]
    started: list = []
    asyncio.run(start_all(backends, started))
    assert log[:3] == ["a begins", "b begins", "c begins"]   # none waited for another to be ready
    assert sorted(b.name for b in started) == ["a", "b", "c"]


def test_a_model_that_fails_leaves_the_others_started_for_the_caller_to_stop_and_raises():
    log: list[str] = []
    backends = [SlowBackend("a", log), SlowBackend("b", log, fail=True), SlowBackend("c", log)]
    started: list = []
    with pytest.raises(StartFailed, match="^model 'b': OSError: b cannot start$"):   # named, in one line
        asyncio.run(start_all(backends, started))
    assert sorted(b.name for b in started) == ["a", "c"]   # all settled before the raise


def test_a_fresh_gateway_starts_two_local_models_side_by_side_without_importing_torch(tmp_path):
    """In a fresh interpreter, where transformers is not imported yet (its lazily
    resolved names once broke when two models loaded their tokenizers at once)."""
    script = textwrap.dedent("""
        import asyncio, sys
        from gateway.app import build_app
        from gateway.config import key_digest, parse_config
        model = {"kind": "local", "path": "tiny", "num_workers": 1, "engine": {"num_hot_blocks": 64}}
        config = parse_config({"models": [dict(model, name="a"), dict(model, name="b")],
                               "tenants": [{"name": "t", "api_key_sha256": [key_digest("sk-t")]}]})
        app = build_app(config)

        async def main():
            async with app.router.lifespan_context(app):
                state = app.state.gateway
                print(sorted(name for name, backend in state.backends.items() if backend.health()["ready"]))
                print(state.forecasts is not None)

        asyncio.run(main())
        print("torch" in sys.modules)
    """)
    env = dict(os.environ, STEPAHEAD_TRACE_DB=str(tmp_path / "traces.sqlite3"),
               STEPAHEAD_PREDICTOR_DIR=str(tmp_path / "predictor"),
               STEPAHEAD_RESPONSES_DB=str(tmp_path / "responses.sqlite3"), LITELLM_LOCAL_MODEL_COST_MAP="True")
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split("\n")[:3] == ["['a', 'b']", "True", "False"]
