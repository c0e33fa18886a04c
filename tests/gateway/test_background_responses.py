"""Background responses (`background: true`): polled, streamed and resumed, cancelled,
failed, continued, deleted; per tenant; through the official client where it can."""
import asyncio
import json
import os
import signal
import subprocess
import sys
import time

import httpx
import openai
import pytest

from tests.gateway.conftest import KEYS
from tests.gateway.test_disconnect import LONG, wait_until

FINAL = ("completed", "incomplete", "failed", "cancelled")


@pytest.fixture(scope="module")
def client(gateway):
    return openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=KEYS["alpha"], max_retries=0)


@pytest.fixture
async def http(gateway):
    async with httpx.AsyncClient(base_url=gateway.base_url, timeout=60) as http:
        yield http


def archived(database, tenant: str, response_id: str):
    """The response as the responses' file holds it (read once the gateway stopped)."""
    from gateway.response_archive import ResponseArchive

    archive = ResponseArchive(database, 16)
    try:
        return archive.get(tenant, response_id)
    finally:
        archive.close()


def poll(client, response_id: str, timeout_s: float = 60.0):
    deadline_s = time.monotonic() + timeout_s
    response = client.responses.retrieve(response_id)
    while response.status not in FINAL and time.monotonic() < deadline_s:
        time.sleep(0.05)
        response = client.responses.retrieve(response_id)
    return response


def events_of(text: str) -> list[dict]:
    return [json.loads(line[len("data: "):]) for line in text.splitlines() if line.startswith("data: ")]


def test_a_background_response_answers_queued_and_ends_as_the_same_request_in_the_foreground(client):
    request = dict(model="tiny", input="Name three colours.", max_output_tokens=12, temperature=0)
    started = client.responses.create(background=True, **request)
    assert started.status in ("queued", "in_progress") and started.background is True and started.output == []
    done = poll(client, started.id)
    assert done.status in ("completed", "incomplete") and done.background is True
    foreground = client.responses.create(**request)
    assert foreground.background is False
    assert done.output_text == foreground.output_text and done.usage.output_tokens == foreground.usage.output_tokens
    items = client.responses.input_items.list(started.id)
    assert [item.content[0].text for item in items.data] == ["Name three colours."]
    follow_up = client.responses.create(model="tiny", input="And one more?", previous_response_id=started.id,
                                        max_output_tokens=4)
    assert follow_up.usage.input_tokens > done.usage.input_tokens  # the conversation was continued


def test_a_background_response_must_be_stored(client):
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="tiny", input="hi", background=True, store=False)
    assert caught.value.body["param"] == "store"


async def test_a_background_stream_can_be_left_and_resumed_from_any_sequence_number(gateway, http):
    headers = gateway.headers()
    body = {"model": "tiny", "input": "Count to ten.", "max_output_tokens": 24, "temperature": 0,
            "background": True, "stream": True}
    async with http.stream("POST", "/v1/responses", headers=headers, json=body) as response:
        assert response.status_code == 200
        lines = response.aiter_lines()
        first = [json.loads((await anext(lines))[len("data: "):]) for _ in range(3) if await anext(lines)]
    # the client left after two events; the run goes on
    assert [event["type"] for event in first[:2]] == ["response.created", "response.queued"]
    response_id = first[0]["response"]["id"]
    assert first[0]["response"]["background"] is True
    whole = await http.get(f"/v1/responses/{response_id}", params={"stream": "true"}, headers=headers)
    events = events_of(whole.text)
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    assert events[0] == first[0] and events[2]["type"] == "response.in_progress"
    assert events[-1]["type"] in ("response.completed", "response.incomplete")
    rest = await http.get(f"/v1/responses/{response_id}", params={"stream": "true", "starting_after": 3},
                          headers=headers)
    assert events_of(rest.text) == events[4:]
    stored = (await http.get(f"/v1/responses/{response_id}", headers=headers)).json()
    assert stored["output"] == events[-1]["response"]["output"] and stored["status"] == events[-1]["response"]["status"]


async def test_a_queued_response_is_cancelled_and_cancelling_again_answers_the_same(gateway, http):
    headers = gateway.headers("cancel")  # one request at a time: a long stream holds the slot
    async with http.stream("POST", "/v1/chat/completions", headers=headers, json=dict(LONG, stream=True)) as held:
        lines = held.aiter_lines()
        await anext(lines)
        started = (await http.post("/v1/responses", headers=headers,
                                   json={"model": "tiny", "input": "hi", "background": True})).json()
        response_id = started["id"]
        polled = (await http.get(f"/v1/responses/{response_id}", headers=headers)).json()
        assert polled["status"] == "queued"
        items = (await http.get(f"/v1/responses/{response_id}/input_items", headers=headers)).json()
        assert [item["content"][0]["text"] for item in items["data"]] == ["hi"]
        continued = await http.post("/v1/responses", headers=headers, json={
            "model": "tiny", "input": "more", "previous_response_id": response_id})
        assert continued.status_code == 400 and "still queued" in continued.json()["error"]["message"]
        cancelled = await http.post(f"/v1/responses/{response_id}/cancel", headers=headers)
        assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
        again = await http.post(f"/v1/responses/{response_id}/cancel", headers=headers)
        assert again.json() == cancelled.json()
    assert (await http.get(f"/v1/responses/{response_id}", headers=headers)).json()["status"] == "cancelled"
    limiter = gateway.state.limiters["cancel"]
    assert await wait_until(lambda: limiter.num_active == 0 and limiter.num_queued == 0, 5.0)
    continued = await http.post("/v1/responses", headers=headers, json={
        "model": "tiny", "input": "more", "previous_response_id": response_id})
    assert continued.status_code == 400 and continued.json()["error"]["param"] == "previous_response_id"


async def test_a_running_response_is_cancelled_mid_generation(gateway, http):
    headers = gateway.headers("beta")
    started = (await http.post("/v1/responses", headers=headers, json={
        "model": "fake", "input": "slow", "background": True})).json()
    response_id = started["id"]
    deadline_s = time.monotonic() + 10
    while (await http.get(f"/v1/responses/{response_id}", headers=headers)).json()["status"] == "queued":
        assert time.monotonic() < deadline_s
        await asyncio.sleep(0.02)
    cancelled = (await http.post(f"/v1/responses/{response_id}/cancel", headers=headers)).json()
    assert cancelled["status"] == "cancelled" and cancelled["error"] is None
    assert await wait_until(lambda: gateway.state.limiters["beta"].num_active == 0, 5.0)
    replayed = await http.get(f"/v1/responses/{response_id}", headers=headers,
                              params={"stream": "true", "starting_after": 0})
    last = events_of(replayed.text)[-1]   # a reader learns the run ended, and how
    assert last["type"] == "response.cancelled" and last["response"]["status"] == "cancelled"


async def test_what_cannot_be_cancelled_or_streamed_is_a_400_and_other_tenants_get_404(gateway, http, client):
    foreground = client.responses.create(model="tiny", input="hi", max_output_tokens=2)
    answer = await http.post(f"/v1/responses/{foreground.id}/cancel", headers=gateway.headers())
    assert answer.status_code == 400 and "background" in answer.json()["error"]["message"]
    answer = await http.get(f"/v1/responses/{foreground.id}", params={"stream": "true"}, headers=gateway.headers())
    assert answer.status_code == 400 and answer.json()["error"]["param"] == "stream"
    done = poll(client, client.responses.create(model="tiny", input="hi", max_output_tokens=2, background=True).id)
    answer = await http.post(f"/v1/responses/{done.id}/cancel", headers=gateway.headers())
    assert answer.status_code == 400 and done.status in answer.json()["error"]["message"]
    for params, param in (({"stream": "yes"}, "stream"), ({"stream": "true", "starting_after": "-1"}, "starting_after"),
                          ({"stream": "true", "starting_after": "1" * 40}, "starting_after")):
        answer = await http.get(f"/v1/responses/{done.id}", params=params, headers=gateway.headers())
        assert answer.status_code == 400 and answer.json()["error"]["param"] == param
    for method, path, params in (("GET", "", {}), ("GET", "", {"stream": "true"}), ("POST", "/cancel", {}),
                                 ("GET", "/input_items", {}), ("DELETE", "", {})):
        answer = await http.request(method, f"/v1/responses/{done.id}{path}", params=params,
                                    headers=gateway.headers("beta"))
        assert answer.status_code == 404, (method, path)
    assert client.responses.retrieve(done.id).status == done.status


async def test_a_run_turned_away_for_now_stays_queued_and_runs_once_admitted(gateway, http):
    """A full tenant queue is a refusal waiting cures: the run stays `queued`, asks again as
    Retry-After says, and runs once a slot is free (QA99: such runs failed at once)."""
    headers = gateway.headers("conc")  # one running, one queued at most
    async with http.stream("POST", "/v1/chat/completions", headers=headers, json=dict(LONG, stream=True)) as held:
        lines = held.aiter_lines()
        await anext(lines)
        queued = (await http.post("/v1/responses", headers=headers,
                                  json={"model": "tiny", "input": "a", "background": True,
                                        "max_output_tokens": 2})).json()
        refused = (await http.post("/v1/responses", headers=headers,
                                   json={"model": "tiny", "input": "b", "background": True,
                                         "max_output_tokens": 2})).json()
        await asyncio.sleep(1.5)   # past its first Retry-After: asked again, turned away again
        waiting = (await http.get(f"/v1/responses/{refused['id']}", headers=headers)).json()
        assert waiting["status"] == "queued"
    deadline_s = time.monotonic() + 60
    for response_id in (queued["id"], refused["id"]):
        while (done := (await http.get(f"/v1/responses/{response_id}", headers=headers)).json())["status"] in (
                "queued", "in_progress"):
            assert time.monotonic() < deadline_s
            await asyncio.sleep(0.05)
        assert done["status"] in ("completed", "incomplete"), done


async def test_a_run_that_can_never_be_admitted_fails_with_the_reason(gateway, http):
    headers = gateway.headers("tpm")   # 600 tokens a minute: a run that may use more never fits
    refused = (await http.post("/v1/responses", headers=headers,
                               json={"model": "tiny", "input": "b", "background": True,
                                     "max_output_tokens": 700})).json()
    deadline_s = time.monotonic() + 10
    while (failed := (await http.get(f"/v1/responses/{refused['id']}", headers=headers)).json())["status"] != "failed":
        assert time.monotonic() < deadline_s
        await asyncio.sleep(0.02)
    assert failed["error"]["code"] and failed["error"]["message"] and failed["output"] == []
    events = events_of((await http.get(f"/v1/responses/{refused['id']}", params={"stream": "true"},
                                       headers=headers)).text)
    assert events[-1]["type"] == "response.failed" and events[-1]["response"]["error"] == failed["error"]


async def test_deleting_a_running_response_stops_it(gateway, http):
    headers = gateway.headers("beta")
    started = (await http.post("/v1/responses", headers=headers, json={
        "model": "fake", "input": "slow", "background": True})).json()
    deleted = await http.delete(f"/v1/responses/{started['id']}", headers=headers)
    assert deleted.status_code == 200 and deleted.json()["deleted"] is True
    assert (await http.get(f"/v1/responses/{started['id']}", headers=headers)).status_code == 404
    assert gateway.state.background.get("beta", started["id"]) is None
    assert await wait_until(lambda: gateway.state.limiters["beta"].num_active == 0, 5.0)


def test_stopping_the_gateway_stores_its_running_responses_as_failed(fake_upstream, tmp_path):
    from gateway.app import build_app
    from gateway.config import key_digest, parse_config
    from tests.gateway.serving import start_server

    database = tmp_path / "responses.sqlite3"
    config = parse_config({
        "server": {"responses_db": str(database)},
        "models": [{"name": "fake", "kind": "upstream", "litellm_model": "openai/fake-model",
                    "api_base": f"{fake_upstream.base_url}/v1", "api_key_env": "STEPAHEAD_TEST_FAKE_KEY"}],
        "tenants": [{"name": "alpha", "api_key_sha256": [key_digest(KEYS["alpha"])]}]})
    server = start_server(build_app(config))
    try:
        started = httpx.post(f"{server.base_url}/v1/responses", headers={"Authorization": f"Bearer {KEYS['alpha']}"},
                             json={"model": "fake", "input": "slow", "background": True}).json()
        assert started["status"] in ("queued", "in_progress")
    finally:
        server.stop()
    stored = archived(database, "alpha", started["id"])
    assert stored is not None and stored.response["status"] == "failed" and stored.response["background"] is True
    assert stored.response["error"]["code"] == "server_error"   # the gateway stopped: not a client's cancel


CRASHING_GATEWAY = """
import json, sys, uvicorn
from gateway.app import build_app
from gateway.config import parse_config
uvicorn.run(build_app(parse_config(json.loads(sys.argv[1]))), host="127.0.0.1", port=int(sys.argv[2]),
            log_level="warning")
"""


def test_background_responses_of_a_killed_gateway_read_back_failed_and_not_while_it_runs(fake_upstream, tmp_path):
    """kill -9 (no graceful stop stores them `failed`): the queued and running ones
    answer `failed` after the restart (an error saying the gateway stopped: FI85, not
    `cancelled`), not a 404; a gateway on the same file that starts while the first
    still runs leaves them running."""
    from gateway.app import build_app
    from gateway.config import key_digest, parse_config
    from tests.gateway.serving import free_port, start_server

    os.environ["STEPAHEAD_TEST_FAKE_KEY"] = "sk-upstream-secret"
    # passthrough: the child gateway starts without importing litellm (seconds of CPU)
    settings = {"server": {"responses_db": str(tmp_path / "responses.sqlite3")},
                "models": [{"name": "fake", "kind": "upstream", "litellm_model": "openai/fake-model",
                            "api_base": f"{fake_upstream.base_url}/v1", "api_key_env": "STEPAHEAD_TEST_FAKE_KEY",
                            "passthrough": True}],
                "tenants": [{"name": "alpha", "api_key_sha256": [key_digest(KEYS["alpha"])],
                             "limits": {"max_concurrent": 1, "max_queued": 4}}]}
    headers = {"Authorization": f"Bearer {KEYS['alpha']}"}
    port = free_port()
    crashing = subprocess.Popen([sys.executable, "-c", CRASHING_GATEWAY, json.dumps(settings), str(port)],
                                cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    try:
        url = f"http://127.0.0.1:{port}/v1/responses"
        deadline_s = time.monotonic() + 120
        while True:
            try:
                httpx.get(f"{url}/none", headers=headers)
                break
            except httpx.TransportError:
                assert crashing.poll() is None and time.monotonic() < deadline_s
                time.sleep(0.1)
        body = {"model": "fake", "input": "hang", "background": True}   # the upstream answers in 60 s
        ids = [httpx.post(url, headers=headers, json=body).json()["id"] for _ in range(3)]
        deadline_s = time.monotonic() + 10
        while (running := httpx.get(f"{url}/{ids[0]}", headers=headers).json()["status"]) == "queued":
            assert time.monotonic() < deadline_s
            time.sleep(0.02)
        assert running == "in_progress"   # one at a time: the others wait queued
        beside = start_server(build_app(parse_config(settings)))
        try:
            seen = [httpx.get(f"{beside.base_url}/v1/responses/{rid}", headers=headers) for rid in ids]
            elsewhere = httpx.post(f"{beside.base_url}/v1/responses/{ids[1]}/cancel", headers=headers)
            streamed_elsewhere = httpx.get(f"{beside.base_url}/v1/responses/{ids[0]}?stream=true&starting_after=0",
                                           headers=headers)
        finally:
            beside.stop()
        # QA133 M1: it said the events "are no longer kept ... GET it for the final response" of a running one
        assert streamed_elsewhere.status_code == 400
        assert "another gateway" in streamed_elsewhere.json()["error"]["message"]
        assert [(answer.status_code, answer.json().get("status")) for answer in seen] == [
            (200, "in_progress"), (200, "queued"), (200, "queued")]
        assert elsewhere.status_code == 400 and "another gateway" in elsewhere.json()["error"]["message"]
    finally:
        crashing.send_signal(signal.SIGKILL)
        crashing.wait(10)
    restarted = start_server(build_app(parse_config(settings)))
    try:
        after = [httpx.get(f"{restarted.base_url}/v1/responses/{rid}", headers=headers) for rid in ids]
        cancelled = httpx.post(f"{restarted.base_url}/v1/responses/{ids[1]}/cancel", headers=headers)
        continued = httpx.post(f"{restarted.base_url}/v1/responses", headers=headers, json={
            "model": "fake", "input": "more", "previous_response_id": ids[0]})
    finally:
        restarted.stop()
    assert [(answer.status_code, answer.json().get("status")) for answer in after] == [(200, "failed")] * 3
    assert after[0].json()["background"] is True and after[0].json()["error"]["code"] == "server_error"
    assert cancelled.status_code == 400 and "'failed'" in cancelled.json()["error"]["message"]   # it has ended
    assert continued.status_code == 400 and "failed" in continued.json()["error"]["message"]


def test_the_official_client_streams_a_background_response_and_resumes_it(client):
    stream = client.responses.create(model="tiny", input="Say something.", max_output_tokens=16, temperature=0,
                                     background=True, stream=True)
    seen = []
    for event in stream:
        seen.append(event)
        if len(seen) == 3:
            break
    stream.close()
    assert [event.type for event in seen] == ["response.created", "response.queued", "response.in_progress"]
    resumed = list(client.responses.retrieve(seen[0].response.id, stream=True, starting_after=2))
    assert resumed[0].sequence_number == 3 and resumed[-1].type in ("response.completed", "response.incomplete")
    text = "".join(event.delta for event in resumed if event.type == "response.output_text.delta")
    assert text == resumed[-1].response.output_text == poll(client, seen[0].response.id).output_text


async def _cancelled_after_deltas(gateway, http, tenant: str, body: dict, num_deltas: int) -> tuple[list[dict], dict]:
    """(every event a reader of the background stream of `body` reads, the cancel's
    answer), the cancel sent once `num_deltas` text deltas were read."""
    headers = gateway.headers(tenant)
    events, answer = [], None
    async with http.stream("POST", "/v1/responses", headers=headers,
                           json={**body, "background": True, "stream": True}) as response:
        async for line in response.aiter_lines():
            if not line.startswith("data: "):
                continue
            events.append(json.loads(line[len("data: "):]))
            deltas = [event for event in events if event["type"] == "response.output_text.delta"]
            if answer is None and len(deltas) == num_deltas:
                response_id = events[0]["response"]["id"]
                answer = await http.post(f"/v1/responses/{response_id}/cancel", headers=headers)
                assert answer.status_code == 200, answer.text
    return events, answer.json()


def _closed_before_the_end(events: list[dict]) -> None:
    """The events are numbered without a gap, every item and part opened is closed,
    and the last is `response.cancelled` with the output the stream sent."""
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    kinds = [event["type"] for event in events]
    assert kinds[-1] == "response.cancelled" and kinds.count("response.cancelled") == 1
    assert kinds.count("response.output_item.added") == kinds.count("response.output_item.done") >= 1
    assert kinds.count("response.content_part.added") == kinds.count("response.content_part.done")
    done = [event["item"] for event in events if event["type"] == "response.output_item.done"]
    assert events[-1]["response"]["output"] == done


async def test_a_cancelled_response_keeps_the_text_it_streamed_and_its_usage(gateway, http):
    """The tiny model, cut after 12 deltas of a reply of up to 2,000 tokens."""
    events, cancelled = await _cancelled_after_deltas(gateway, http, "beta", {
        "model": "tiny", "input": "Go on forever.", "max_output_tokens": 2000, "temperature": 0}, 12)
    _closed_before_the_end(events)
    text = "".join(event["delta"] for event in events if event["type"] == "response.output_text.delta")
    [done] = [event for event in events if event["type"] == "response.output_text.done"]
    assert done["text"] == text and len(text) >= 12
    [message] = cancelled["output"]
    assert cancelled["status"] == "cancelled" and message["status"] == "incomplete"
    assert message["content"][0]["text"] == text
    assert cancelled == events[-1]["response"]
    usage = cancelled["usage"]   # the prompt, and the tokens generated until the cancel (some maybe unsent)
    assert usage["input_tokens"] > 0 and 12 <= usage["output_tokens"] < 2000
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    stored = (await http.get(f"/v1/responses/{cancelled['id']}", headers=gateway.headers("beta"))).json()
    assert stored == cancelled


async def test_a_cancelled_upstream_response_keeps_its_text_and_has_no_usage(gateway, http):
    """An upstream's stream cut short says nothing of its tokens: no usage is made up."""
    events, cancelled = await _cancelled_after_deltas(gateway, http, "beta", {"model": "fake", "input": "slow"}, 1)
    _closed_before_the_end(events)
    text = "".join(event["delta"] for event in events if event["type"] == "response.output_text.delta")
    assert text.startswith("echo:") and cancelled["output"][0]["content"][0]["text"] == text
    assert cancelled["status"] == "cancelled" and cancelled["usage"] is None
    replayed = events_of((await http.get(f"/v1/responses/{cancelled['id']}", headers=gateway.headers("beta"),
                                         params={"stream": "true"})).text)
    assert replayed == events


def test_stopping_the_gateway_stores_a_running_response_with_its_output_so_far(fake_upstream, tmp_path):
    from gateway.app import build_app
    from gateway.config import key_digest, parse_config
    from tests.gateway.serving import start_server

    database = tmp_path / "responses.sqlite3"
    app = build_app(parse_config({
        "server": {"responses_db": str(database)},
        "models": [{"name": "fake", "kind": "upstream", "litellm_model": "openai/fake-model",
                    "api_base": f"{fake_upstream.base_url}/v1", "api_key_env": "STEPAHEAD_TEST_FAKE_KEY"}],
        "tenants": [{"name": "alpha", "api_key_sha256": [key_digest(KEYS["alpha"])]}]}))
    server = start_server(app)
    try:
        with httpx.stream("POST", f"{server.base_url}/v1/responses", timeout=30,
                          headers={"Authorization": f"Bearer {KEYS['alpha']}"},
                          json={"model": "fake", "input": "slow", "background": True, "stream": True}) as reply:
            lines = reply.iter_lines()   # "echo: " comes, then "slow " 0.5 s later
            started = json.loads(next(line for line in lines if line.startswith("data: "))[len("data: "):])
            next(line for line in lines if "response.output_text.delta" in line)
        run = app.state.gateway.background.get("alpha", started["response"]["id"])   # the reader left; it runs on
    finally:
        server.stop()
    stored = archived(database, "alpha", run.response_id)
    assert stored.response["status"] == "failed" and stored.response["error"]["code"] == "server_error"
    [message] = stored.response["output"]
    assert message["status"] == "incomplete" and message["content"][0]["text"].startswith("echo:")
    assert not any(b"response.cancelled" in event for event in run.events)
    assert run.events[-1].startswith(b"event: response.failed\n")   # its readers read how it ended


def test_a_background_response_deleted_through_another_gateway_is_gone_from_the_one_running_it(
        fake_upstream, tmp_path):
    """Two gateways on one responses' file: a delete through the one not running it made
    the other still answer it (a GET while it ran, its events replayed by `stream=true`);
    now both answer 404. A GET never stops a run (QA78: one the store had evicted was
    stopped so): it finishes there and is not stored again, as docs/api.md says."""
    from gateway.app import build_app
    from gateway.config import key_digest, parse_config
    from tests.gateway.serving import start_server

    os.environ["STEPAHEAD_TEST_FAKE_KEY"] = "sk-upstream-secret"
    settings = {"server": {"responses_db": str(tmp_path / "responses.sqlite3")},
                "models": [{"name": "fake", "kind": "upstream", "litellm_model": "openai/fake-model",
                            "api_base": f"{fake_upstream.base_url}/v1", "api_key_env": "STEPAHEAD_TEST_FAKE_KEY"}],
                "tenants": [{"name": "alpha", "api_key_sha256": [key_digest(KEYS["alpha"])]}]}
    headers = {"Authorization": f"Bearer {KEYS['alpha']}"}
    running_app = build_app(parse_config(settings))
    running, other = start_server(running_app), start_server(build_app(parse_config(settings)))
    try:
        url = f"{running.base_url}/v1/responses"
        response_id = httpx.post(url, headers=headers, json={
            "model": "fake", "input": "hang", "background": True}).json()["id"]   # the upstream answers in 60 s
        deadline_s = time.monotonic() + 10
        while httpx.get(f"{url}/{response_id}", headers=headers).json()["status"] != "in_progress":
            assert time.monotonic() < deadline_s
            time.sleep(0.02)
        deleted = httpx.delete(f"{other.base_url}/v1/responses/{response_id}", headers=headers)
        assert deleted.status_code == 200 and deleted.json()["deleted"] is True
        streamed = httpx.get(f"{url}/{response_id}", params={"stream": "true"}, headers=headers)
        polled = httpx.get(f"{url}/{response_id}", headers=headers)
        assert (streamed.status_code, polled.status_code) == (404, 404)
        run = running_app.state.gateway.background.get("alpha", response_id)
        assert run is not None and not run.is_done   # a GET leaves it going
    finally:
        running.stop()   # stores it cancelled: only over a row still there
        other.stop()
    assert run.is_done and archived(tmp_path / "responses.sqlite3", "alpha", response_id) is None   # not stored again
