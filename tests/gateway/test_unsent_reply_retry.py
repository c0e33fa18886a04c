"""A reply none of which was sent runs again, once, when its worker dies under it; a begun stream cannot."""
from __future__ import annotations

import httpx
import pytest

from gateway.backend import TextDelta
from gateway.errors import server_error
from gateway.local import LocalBackend

BODY = {"model": "tiny", "messages": [{"role": "user", "content": "Say something."}], "max_tokens": 4,
        "temperature": 0}


@pytest.fixture
def dying_workers(monkeypatch):
    """LocalBackend.run, whose first `failures` runs yield a piece of text (none with
    `before_first`: the worker's tokens were all held back, say by a stop string that might
    follow) and then fail as a worker that died mid-reply does; the runs after them are
    the real ones."""
    real_run = LocalBackend.run
    state = {"failures": 0, "runs": 0, "before_first": False}

    async def run(self, prepared):
        state["runs"] += 1
        if state["failures"] > 0:
            state["failures"] -= 1
            if not state["before_first"]:
                yield TextDelta("LOST TEXT ")
            raise server_error("The model worker failed: worker w0 died", code="worker_died")
        async for event in real_run(self, prepared):
            yield event

    monkeypatch.setattr(LocalBackend, "run", run)   # slotted: patched on its class
    return state


async def _post(gateway, body: dict) -> httpx.Response:
    async with httpx.AsyncClient(base_url=gateway.base_url, timeout=120) as client:
        return await client.post("/v1/chat/completions", json=body, headers=gateway.headers("alpha"))


async def test_a_whole_reply_runs_again_once_when_its_worker_dies(gateway, dying_workers, caplog):
    dying_workers["failures"] = 1
    with caplog.at_level("WARNING", logger="stepahead.gateway"):
        answered = await _post(gateway, BODY)
    assert answered.status_code == 200 and dying_workers["runs"] == 2
    reply = answered.json()
    assert "LOST TEXT" not in reply["choices"][0]["message"]["content"]   # the failed run's text is gone
    assert reply["usage"]["completion_tokens"] == 4
    assert f"request {reply['id']} runs again" in caplog.text
    dying_workers.update(failures=2, runs=0)   # dies twice: the error, after the second run
    failed = await _post(gateway, BODY)
    assert failed.status_code == 500 and failed.json()["error"]["code"] == "worker_died"
    assert dying_workers["runs"] == 2


async def _stream(gateway) -> tuple[int, str]:
    async with httpx.AsyncClient(base_url=gateway.base_url, timeout=120) as client:
        async with client.stream("POST", "/v1/chat/completions", json={**BODY, "stream": True},
                                 headers=gateway.headers("alpha")) as streamed:
            return streamed.status_code, (await streamed.aread()).decode()


async def test_a_stream_runs_again_before_its_first_event_and_ends_with_the_error_after(gateway, dying_workers):
    dying_workers.update(failures=1, before_first=True)   # nothing sent yet: it runs again
    status, text = await _stream(gateway)
    assert status == 200 and text.rstrip().endswith("data: [DONE]") and "worker_died" not in text
    assert dying_workers["runs"] == 2
    dying_workers.update(failures=1, before_first=False, runs=0)   # begun: it cannot be taken back
    status, text = await _stream(gateway)
    assert status == 200 and "LOST TEXT" in text and '"code":"worker_died"' in text
    assert dying_workers["runs"] == 1
