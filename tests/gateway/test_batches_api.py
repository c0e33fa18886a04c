"""The Files and Batch APIs through the official client, on the tiny model: a batch runs
its requests through the gateway's own endpoints and ends with its output and error
files; it goes on after a restart; tenants never see each other's files or batches."""
import json
import sqlite3
import time

import httpx
import openai
import pytest

from gateway.app import build_app
from gateway.config import key_digest, parse_config
from tests.gateway.conftest import KEYS
from tests.gateway.serving import start_server


@pytest.fixture(scope="module")
def client(gateway):
    return openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=KEYS["alpha"], max_retries=0)


def _jsonl(lines: list[dict]) -> bytes:
    return "\n".join(json.dumps(line) for line in lines).encode()


def _chat_line(custom_id: str, content: str = "hi", **body) -> dict:
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": "tiny", "max_tokens": 4, "messages": [{"role": "user", "content": content}], **body}}


def _finished(client, batch_id: str, timeout_s: float = 120):
    deadline_s = time.monotonic() + timeout_s
    while (batch := client.batches.retrieve(batch_id)).status not in ("completed", "failed", "cancelled", "expired"):
        assert time.monotonic() < deadline_s, batch
        time.sleep(0.1)
    return batch


def _results(client, file_id: str) -> dict[str, dict]:
    return {line["custom_id"]: line for line in map(json.loads, client.files.content(file_id).text.splitlines())}


def test_a_batch_runs_its_requests_and_ends_with_its_output_and_error_files(client, gateway, monkeypatch):
    tracer = gateway.app.state.gateway.tracer
    traced: list[str] = []
    begin = tracer.begin
    monkeypatch.setattr(tracer, "begin", lambda tenant, headers, body, **kw: (
        traced.append(json.dumps(body)), begin(tenant, headers, body, **kw))[1])
    lines = [_chat_line(f"r{n}", f"Say {n}.", seed=n) for n in range(5)]
    lines.append(_chat_line("too-hot", temperature=5))
    upload = client.files.create(file=("requests.jsonl", _jsonl(lines)), purpose="batch")
    assert (upload.purpose, upload.filename, upload.bytes) == ("batch", "requests.jsonl", len(_jsonl(lines)))
    batch = client.batches.create(input_file_id=upload.id, endpoint="/v1/chat/completions",
                                  completion_window="24h", metadata={"job": "nightly"})
    assert batch.status == "in_progress" and batch.request_counts.total == 6 and batch.metadata == {"job": "nightly"}
    done = _finished(client, batch.id)
    assert done.status == "completed" and (done.request_counts.completed, done.request_counts.failed) == (5, 1)
    assert done.completed_at >= done.in_progress_at and done.model == "tiny"
    output = _results(client, done.output_file_id)
    assert sorted(output) == [f"r{n}" for n in range(5)]
    reply = output["r3"]["response"]
    assert reply["status_code"] == 200 and reply["body"]["object"] == "chat.completion"
    assert reply["request_id"] == reply["body"]["id"] and output["r3"]["id"].startswith("batch_req_")
    # batch requests are not agent steps: none was traced (a client's own request is)
    assert not any("Say 3." in body for body in traced)
    # a seeded request answers as it does when a client sends it
    direct = client.chat.completions.create(**lines[3]["body"])
    assert reply["body"]["choices"][0]["message"]["content"] == direct.choices[0].message.content
    assert any("Say 3." in body for body in traced)
    assert done.usage.input_tokens == sum(r["response"]["body"]["usage"]["prompt_tokens"] for r in output.values())
    errors = _results(client, done.error_file_id)
    assert errors["too-hot"]["response"]["status_code"] == 400
    assert errors["too-hot"]["response"]["body"]["error"]["param"] == "temperature"
    assert client.files.retrieve(done.output_file_id).purpose == "batch_output"
    assert done.id in [b.id for b in client.batches.list(limit=100)]


def test_a_batch_of_responses_completions_embeddings_and_upstream_chats(client):
    for endpoint, body in (("/v1/responses", {"model": "tiny", "input": "Hello", "max_output_tokens": 3}),
                           ("/v1/completions", {"model": "tiny", "prompt": "Hello", "max_tokens": 3}),
                           ("/v1/embeddings", {"model": "fake", "input": ["one", "two"]}),
                           ("/v1/chat/completions", {"model": "mock", "messages": [{"role": "user", "content": "hi"}]})):
        upload = client.files.create(file=("in.jsonl", _jsonl([{"custom_id": "only", "method": "POST",
                                                                 "url": endpoint, "body": body}])), purpose="batch")
        done = _finished(client, client.batches.create(input_file_id=upload.id, endpoint=endpoint,
                                                       completion_window="24h").id)
        [line] = _results(client, done.output_file_id).values()
        assert line["response"]["body"]["object"] in ("response", "text_completion", "list", "chat.completion")
        assert done.usage.input_tokens > 0 and done.request_counts.completed == 1


def test_a_bad_input_file_fails_the_batch_before_anything_runs(client):
    upload = client.files.create(file=("bad.jsonl", _jsonl([_chat_line("a"), _chat_line("a"),
                                                             {**_chat_line("b"), "url": "/v1/embeddings"}])),
                                 purpose="batch")
    batch = client.batches.create(input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h")
    assert batch.status == "failed" and batch.failed_at and batch.output_file_id is None
    assert [(e.line, e.code) for e in batch.errors.data] == [(2, "duplicate_custom_id"), (3, "mismatched_endpoint")]


def test_a_cancelled_batch_stops_sending_and_keeps_what_finished(client):
    upload = client.files.create(file=("many.jsonl", _jsonl([_chat_line(f"r{n}", max_tokens=32) for n in range(40)])),
                                 purpose="batch")
    batch = client.batches.create(input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h")
    scrape = httpx.get(f"{client.base_url}".removesuffix("/v1/") + "/metrics",
                       headers={"Authorization": f"Bearer {KEYS['alpha']}"}).text
    pending = [line for line in scrape.splitlines() if line.startswith("stepahead_tenant_batch_requests_pending")]
    assert pending and float(pending[0].split()[-1]) > 0 and 'tenant="alpha"' in pending[0]
    cancelling = client.batches.cancel(batch.id)
    assert cancelling.status in ("cancelling", "cancelled")
    done = _finished(client, batch.id)
    assert done.status == "cancelled" and done.cancelled_at
    finished = done.request_counts.completed + done.request_counts.failed
    assert finished < 40 and finished == (len(_results(client, done.output_file_id)) if done.output_file_id else 0)
    with pytest.raises(openai.BadRequestError):
        client.batches.cancel(_finished(client, client.batches.create(
            input_file_id=client.files.create(file=("one.jsonl", _jsonl([_chat_line("x")])), purpose="batch").id,
            endpoint="/v1/chat/completions", completion_window="24h").id).id)   # a completed one


def test_bad_requests_and_other_tenants_get_openai_shaped_errors(client, gateway):
    upload = client.files.create(file=("mine.jsonl", _jsonl([_chat_line("a")])), purpose="batch")
    batch = client.batches.create(input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h")
    beta = openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=KEYS["beta"], max_retries=0)
    for call in (lambda: beta.files.retrieve(upload.id), lambda: beta.files.content(upload.id),
                 lambda: beta.files.delete(upload.id), lambda: beta.batches.retrieve(batch.id),
                 lambda: beta.batches.cancel(batch.id),
                 lambda: beta.batches.create(input_file_id=upload.id, endpoint="/v1/chat/completions",
                                             completion_window="24h")):
        with pytest.raises(openai.NotFoundError):
            call()
    assert upload.id not in [f.id for f in beta.files.list()]
    for kwargs, param in ((dict(input_file_id=upload.id, endpoint="/v1/images", completion_window="24h"), "endpoint"),
                          (dict(input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="1h"),
                           "completion_window"),
                          (dict(input_file_id="file-none", endpoint="/v1/chat/completions", completion_window="24h"),
                           "input_file_id")):
        with pytest.raises(openai.APIStatusError) as refused:
            client.batches.create(**kwargs)
        assert refused.value.status_code in (400, 404) and refused.value.body["param"] == param
    for field in ("endpoint", "completion_window", "input_file_id"):   # not a string: a 400, never a 500
        body = {"input_file_id": upload.id, "endpoint": "/v1/chat/completions", "completion_window": "24h",
                field: {"a": [1]}}
        answer = httpx.post(f"{gateway.base_url}/v1/batches", headers=gateway.headers("alpha"), json=body)
        assert answer.status_code == 400 and answer.json()["error"]["param"] == field
    for path in ("/v1/files", "/v1/batches"):
        answer = httpx.get(f"{gateway.base_url}{path}", headers=gateway.headers("alpha"), params={"after": "x-1"})
        assert answer.status_code == 400 and answer.json()["error"]["param"] == "after"
    other = client.files.create(file=("notes.txt", b"notes"), purpose="user_data")
    with pytest.raises(openai.BadRequestError) as wrong_purpose:
        client.batches.create(input_file_id=other.id, endpoint="/v1/chat/completions", completion_window="24h")
    assert wrong_purpose.value.body["param"] == "input_file_id"
    for output_purpose in ("batch_output", "assistants_output"):   # what the server makes, never an upload
        with pytest.raises(openai.BadRequestError) as bad_purpose:
            client.files.create(file=("x.jsonl", b"{}"), purpose=output_purpose)
        assert bad_purpose.value.body["param"] == "purpose" and "_output" not in bad_purpose.value.body["message"]
    no_file = httpx.post(f"{gateway.base_url}/v1/files", headers=gateway.headers("alpha"), data={"purpose": "batch"},
                         files={"other": ("x", b"x")})
    assert no_file.status_code == 400 and no_file.json()["error"]["param"] == "file"
    assert no_file.json()["error"]["code"] == "missing_required_parameter"
    assert client.files.delete(other.id).deleted
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve(other.id)
    _finished(client, batch.id)


def test_a_malformed_upload_is_a_400_the_server_does_not_log(gateway, caplog):
    caplog.set_level("INFO")
    headers = {**gateway.headers("alpha"), "content-type": "multipart/form-data; boundary=XYZ"}
    answer = httpx.post(f"{gateway.base_url}/v1/files", headers=headers,
                        content=b"--XQZ\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n--XYZ--")
    assert answer.status_code == 400 and "multipart" in answer.json()["error"]["message"]
    assert not [r for r in caplog.records if r.name.startswith("python_multipart")]


def test_a_batch_goes_on_after_a_restart_without_running_a_request_twice(tmp_path):
    config = parse_config({
        "server": {"responses_db": str(tmp_path / "responses.sqlite3"), "batch_concurrency": 1,
                   "max_file_bytes": 16384},
        "models": [{"name": "tiny", "kind": "local", "path": "tiny", "num_workers": 1}],
        "tenants": [{"name": "a", "api_key_sha256": [key_digest("sk-a")]}]})
    server = start_server(build_app(config), startup_timeout_s=300)
    try:
        client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="sk-a", max_retries=0)
        with pytest.raises(openai.APIStatusError) as too_large:
            client.files.create(file=("big.jsonl", b"x" * 20000), purpose="batch")
        assert too_large.value.status_code == 413
        # 16 tokens each: 21 requests left when 3 are done, far more than a stop lets finish
        upload = client.files.create(file=("in.jsonl", _jsonl([_chat_line(f"r{n}", max_tokens=16, ignore_eos=True)
                                                               for n in range(24)])), purpose="batch")
        batch = client.batches.create(input_file_id=upload.id, endpoint="/v1/chat/completions",
                                      completion_window="24h")
        deadline_s = time.monotonic() + 60
        while client.batches.retrieve(batch.id).request_counts.completed < 3:
            assert time.monotonic() < deadline_s
            time.sleep(0.05)
    finally:
        server.stop()
    with sqlite3.connect(tmp_path / "files" / "batches.sqlite3") as db:
        [(record,)] = db.execute("SELECT record FROM batches").fetchall()
    results = (tmp_path / "files" / "batch_results" / f"{batch.id}.jsonl").read_text().splitlines()
    assert json.loads(record)["status"] == "in_progress" and 3 <= len(results) < 24   # stopped midway
    server = start_server(build_app(config), startup_timeout_s=300)
    try:
        client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="sk-a", max_retries=0)
        done = _finished(client, batch.id)
        assert done.status == "completed" and done.request_counts.completed == 24, (
            done, done.error_file_id and client.files.content(done.error_file_id).text[:2000])
        ids = [json.loads(line)["custom_id"] for line in client.files.content(done.output_file_id).text.splitlines()]
        assert sorted(ids) == sorted(f"r{n}" for n in range(24))   # each once
    finally:
        server.stop()
    assert not list((tmp_path / "files" / "batch_results").glob("*.jsonl"))


def test_files_expire_as_asked_batch_uploads_after_30_days_and_a_batch_names_its_outputs_expiry(client):
    brief = client.files.create(file=("notes.txt", b"n"), purpose="user_data",
                                expires_after={"anchor": "created_at", "seconds": 3600})
    assert brief.expires_at == brief.created_at + 3600
    assert client.files.create(file=("notes.txt", b"n"), purpose="user_data").expires_at is None
    as_one_field = httpx.post(f"{client.base_url}files", headers={"Authorization": f"Bearer {client.api_key}"},
                              files={"file": ("notes.txt", b"n")}, data={
                                  "purpose": "user_data", "expires_after": '{"anchor": "created_at", "seconds": 3600}'})
    assert as_one_field.json()["expires_at"] == as_one_field.json()["created_at"] + 3600   # it used to be ignored
    for bad in ("soon", '{"anchor": "created_at"}'):
        refused = httpx.post(f"{client.base_url}files", headers={"Authorization": f"Bearer {client.api_key}"},
                             files={"file": ("notes.txt", b"n")}, data={"purpose": "user_data", "expires_after": bad})
        assert refused.status_code == 400 and refused.json()["error"]["param"] == "expires_after"
    upload = client.files.create(file=("in.jsonl", _jsonl([_chat_line("a")])), purpose="batch")
    assert upload.expires_at == upload.created_at + 30 * 24 * 3600
    batch = client.batches.create(input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h",
                                  output_expires_after={"anchor": "created_at", "seconds": 7200})
    output = client.files.retrieve(_finished(client, batch.id).output_file_id)
    assert output.expires_at == output.created_at + 7200
    for bad in ({"anchor": "created_at", "seconds": 60}, {"anchor": "last_active_at", "seconds": 3600},
                {"anchor": "created_at", "seconds": "soon"}):
        with pytest.raises(openai.BadRequestError) as caught:
            client.files.create(file=("notes.txt", b"n"), purpose="user_data", expires_after=bad)
        assert caught.value.param == "expires_after"
        with pytest.raises(openai.BadRequestError) as caught:
            client.batches.create(input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h",
                                  output_expires_after=bad)
        assert caught.value.param == "output_expires_after"


def test_batch_requests_run_flex_on_local_models_unless_their_line_names_a_tier(client, gateway):
    lines = [_chat_line("plain"), _chat_line("named", service_tier="default")]
    upstream = [{**_chat_line("upstream"), "body": {**_chat_line("upstream")["body"], "model": "mock"}}]
    tiers = {}
    for batch_lines in (lines, upstream):   # a batch runs one model
        upload = client.files.create(file=("tiers.jsonl", _jsonl(batch_lines)), purpose="batch")
        done = _finished(client, client.batches.create(input_file_id=upload.id, endpoint="/v1/chat/completions",
                                                       completion_window="24h").id)
        assert done.metadata is None   # made without metadata: null, as at OpenAI
        tiers.update({custom_id: line["response"]["body"].get("service_tier")
                      for custom_id, line in _results(client, done.output_file_id).items()})
    assert tiers == {"plain": "flex", "named": "default", "upstream": None}
    # a client cannot pass for the batch runner: the header alone changes nothing
    answer = httpx.post(f"{gateway.base_url}/v1/chat/completions", json=lines[0]["body"],
                        headers={**gateway.headers("alpha"), "x-stepahead-batch": "batch_x"})
    assert answer.json()["service_tier"] == "default"


def test_a_line_nested_too_deep_or_holding_a_lone_surrogate_fails_its_batch_not_the_gateway(client):
    deep = (b'{"custom_id": "deep", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "tiny", "x": '
            + b"[" * 100_000 + b"]" * 100_000 + b"}}")
    lone = json.dumps(_chat_line("bad\ud800id")).encode()   # the escape "\ud800"
    upload = client.files.create(file=("odd.jsonl", b"\n".join([deep, _jsonl([_chat_line("fine")]), lone])),
                                 purpose="batch")
    batch = client.batches.create(input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h")
    assert batch.status == "failed" and batch.output_file_id is None
    assert [(e.line, e.code) for e in batch.errors.data] == [(1, "invalid_json_line"), (3, "invalid_json_line")]
    assert client.batches.retrieve(batch.id).status == "failed"


def test_a_batch_line_with_nan_fails_its_batch_as_the_same_body_sent_directly_is_refused(client, gateway):
    """NaN is not JSON (QA50): sent directly it is a 400 `invalid_json`; in a line, the
    line is an `invalid_json_line` and the batch fails validation, as a line that is no
    JSON at all does."""
    body = {**_chat_line("nan")["body"], "temperature": float("nan")}
    direct = httpx.post(f"{gateway.base_url}/v1/chat/completions", content=json.dumps(body),
                        headers={**gateway.headers("alpha"), "content-type": "application/json"})
    assert direct.status_code == 400 and direct.json()["error"]["code"] == "invalid_json"
    upload = client.files.create(file=("nan.jsonl", json.dumps({**_chat_line("nan"), "body": body}).encode()),
                                 purpose="batch")
    batch = client.batches.create(input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h")
    assert batch.status == "failed" and [(e.line, e.code) for e in batch.errors.data] == [(1, "invalid_json_line")]


def test_a_request_past_the_tenants_tokens_per_minute_is_its_result_at_once(gateway):
    """It can never be admitted (429, `x-should-retry: false`): not retried until the window ends."""
    tpm = openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=KEYS["tpm"], max_retries=0)
    upload = tpm.files.create(file=("big.jsonl", _jsonl([_chat_line("big", max_tokens=700)])), purpose="batch")
    done = _finished(tpm, tpm.batches.create(input_file_id=upload.id, endpoint="/v1/chat/completions",
                                             completion_window="24h").id, timeout_s=20)
    assert done.status == "completed" and (done.request_counts.completed, done.request_counts.failed) == (0, 1)
    [line] = _results(tpm, done.error_file_id).values()
    assert line["response"]["status_code"] == 429
    assert "tokens per minute" in line["response"]["body"]["error"]["message"]


def test_files_and_batches_list_in_the_order_made_within_a_second_both_ways(client, gateway):
    made = [client.files.create(file=(f"f{n}.jsonl", _jsonl([_chat_line("a"), _chat_line("a")])), purpose="batch").id
            for n in range(4)]
    assert [f.id for f in client.files.list(limit=4).data] == made[::-1]   # .data: iterating pages on
    assert [client.files.list(limit=1).data[0].id] == made[-1:]
    assert [f.id for f in client.files.list(limit=3, order="asc", after=made[0]).data] == made[1:]
    batches = [client.batches.create(input_file_id=file_id, endpoint="/v1/chat/completions",
                                     completion_window="24h").id for file_id in made]   # each fails at once
    assert [b.id for b in client.batches.list(limit=4).data] == batches[::-1]
    page = client.batches.list(limit=2, after=batches[-1])
    assert [b.id for b in page.data] == batches[1:3][::-1] and page.has_more
    listed = httpx.get(f"{gateway.base_url}/v1/batches", headers=gateway.headers("alpha"),
                       params={"order": "asc", "after": batches[0], "limit": 3}).json()
    assert [b["id"] for b in listed["data"]] == batches[1:]
    sideways = httpx.get(f"{gateway.base_url}/v1/batches", headers=gateway.headers("alpha"),
                         params={"order": "sideways"})
    assert sideways.status_code == 400 and sideways.json()["error"]["param"] == "order"
