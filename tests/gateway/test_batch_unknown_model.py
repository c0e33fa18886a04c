"""QA153 finding 5: a batch file whose lines all name a model the gateway does not serve
passed the create check and ran, each line a 404 `model_not_found` in its error file;
OpenAI fails such a batch when it checks the file. Now it is `failed` at create, with one
file error (`model_not_found`, param `body.model`, the first line naming it) and nothing
runs; a served model runs as before, and a model gone while a batch runs (a restart
without it) still answers each line's 404. QA212 F4: a model that cannot serve the batch's
endpoint (an embeddings batch on a chat model, a chat batch on an embedding model) fails
the same way, with the `model_not_supported` each line would have got."""
from __future__ import annotations

import asyncio
import json
import time

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from gateway.auth import KeyRing
from gateway.batch_input import BatchInput
from gateway.batches_routes import endpoint_refusals
from gateway.embedding_model import EmbeddingModelConfig
from gateway.embeddings import unsupported_model
from gateway.local_embeddings import LocalEmbeddingBackend, embeddings_only
from gateway.batch_runner import BatchRunner
from gateway.batch_store import Batch, BatchStore
from gateway.config import TenantConfig
from gateway.errors import model_not_found
from gateway.file_store import FileStore



def _jsonl(model: str, count: int = 3, url: str = "/v1/chat/completions") -> bytes:
    body = ({"input": "text"} if url == "/v1/embeddings" else {"messages": [{"role": "user", "content": "hi"}]})
    return "\n".join(json.dumps({"custom_id": f"r{n}", "method": "POST", "url": url, "body": {"model": model, **body}})
                     for n in range(count)).encode()


def _create(client: httpx.Client, data: bytes) -> dict:
    upload = client.post("/v1/files", data={"purpose": "batch"}, files={"file": ("in.jsonl", data)})
    assert upload.status_code == 200, upload.text
    created = client.post("/v1/batches", json={
        "input_file_id": upload.json()["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h"})
    assert created.status_code == 200, created.text
    return created.json()


def test_a_batch_naming_a_model_not_served_fails_at_create_and_one_served_runs(gateway):
    served_names = sorted(gateway.app.state.gateway.backends)
    with httpx.Client(base_url=gateway.base_url, headers=gateway.headers("alpha"), timeout=30) as client:
        # a blank line first: the error names the first line naming the model (2), as other file errors do
        failed = _create(client, b"\n" + _jsonl("gpt-4o"))
        assert failed["status"] == "failed" and failed["failed_at"] is not None, failed
        assert failed["errors"]["data"] == [{
            "code": "model_not_found", "message": model_not_found("gpt-4o", served_names).message,
            "param": "body.model", "line": 2}]
        assert "'gpt-4o'" in failed["errors"]["data"][0]["message"]
        assert failed["in_progress_at"] is None
        assert failed["request_counts"] == {"total": 0, "completed": 0, "failed": 0}
        assert (failed["output_file_id"], failed["error_file_id"]) == (None, None)   # nothing ran
        assert client.get(f"/v1/batches/{failed['id']}").json()["status"] == "failed"
        # a model the gateway serves runs as before (the gateway has no model aliases: a model is served
        # under its configured name, as GET /v1/models lists it; a tenant's `models`: test_tenant_models.py)
        assert "mock" in [model["id"] for model in client.get("/v1/models").json()["data"]]
        served = _create(client, _jsonl("mock"))
        assert served["status"] in ("in_progress", "validating") and served["model"] == "mock"
        deadline_s = time.monotonic() + 30
        while (done := client.get(f"/v1/batches/{served['id']}").json())["status"] in (
                "validating", "in_progress", "finalizing"):
            assert time.monotonic() < deadline_s, done
            time.sleep(0.02)
        assert done["status"] == "completed" and done["request_counts"]["completed"] == 3, done


def test_a_model_gone_while_its_batch_runs_answers_each_lines_404(tmp_path):
    """The model is checked at create only: a batch that goes on with its model gone since
    (the app answers 404) keeps the per-line errors."""
    def gone(request: Request):
        error = model_not_found("m")
        return JSONResponse({"error": {"message": error.message, "type": error.type, "param": error.param,
                                       "code": error.code}}, status_code=404)

    async def main():
        keys = KeyRing((TenantConfig("a", ()),))
        files, store = FileStore(None), BatchStore(None)
        runner = BatchRunner(store, files, lambda: keys, concurrency=2)
        await runner.start(Starlette(routes=[Route("/v1/chat/completions", gone, methods=["POST"])]))
        upload = await files.add_bytes("a", "in.jsonl", "batch", _jsonl("m"))
        batch = await runner.create(Batch("batch_1", "a", "/v1/chat/completions", upload.id, "24h", 0, 10**10),
                                    frozenset({"m"}))
        assert batch.status == "in_progress" and batch.errors is None
        async with asyncio.timeout(5):
            while (found := runner.current(await store.get("a", "batch_1"))).status != "completed":
                await asyncio.sleep(0.01)
        lines = [json.loads(line) for line in (await files.read("a", found.error_file_id)).splitlines()]
        await runner.stop()
        store.close()
        files.close()
        return found, lines

    found, lines = asyncio.run(main())
    assert (found.completed, found.failed, found.output_file_id) == (0, 3, None)
    assert {line["response"]["status_code"] for line in lines} == {404}
    assert {line["response"]["body"]["error"]["code"] for line in lines} == {"model_not_found"}


def test_an_embeddings_batch_on_a_chat_model_fails_at_create_with_the_error_each_line_got(gateway):
    """QA212 F4's repro: every line of an embeddings batch on "tiny" was a 400 of its own."""
    with httpx.Client(base_url=gateway.base_url, headers=gateway.headers("alpha"), timeout=30) as client:
        upload = client.post("/v1/files", data={"purpose": "batch"},
                             files={"file": ("in.jsonl", b"\n" + _jsonl("tiny", 4, "/v1/embeddings"))})
        created = client.post("/v1/batches", json={
            "input_file_id": upload.json()["id"], "endpoint": "/v1/embeddings", "completion_window": "24h"}).json()
        assert created["status"] == "failed" and created["in_progress_at"] is None, created
        assert created["errors"]["data"] == [{"code": "model_not_supported", "param": "body.model", "line": 2,
                                              "message": unsupported_model("tiny").message}]
        assert created["request_counts"] == {"total": 0, "completed": 0, "failed": 0}
        direct = client.post("/v1/embeddings", json={"model": "tiny", "input": "text"})   # what each line got
        assert direct.status_code == 400 and direct.json()["error"]["code"] == "model_not_supported"
        assert direct.json()["error"]["message"] == created["errors"]["data"][0]["message"]


def test_each_endpoint_refuses_the_models_that_cannot_serve_it_and_the_input_check_says_so(tmp_path):
    class Chat:   # a local chat model: no embeddings
        pass

    class Upstream:
        async def embed(self, request):
            raise AssertionError

    backends = {"chat": Chat(), "up": Upstream(),
                "enc": LocalEmbeddingBackend(EmbeddingModelConfig(name="enc", path=str(tmp_path)))}
    assert endpoint_refusals(backends, "/v1/embeddings") == {
        "chat": unsupported_model("chat").message, "up": None, "enc": None}
    for endpoint in ("/v1/chat/completions", "/v1/completions", "/v1/responses"):
        assert endpoint_refusals(backends, endpoint) == {"chat": None, "up": None,
                                                         "enc": embeddings_only("enc").message}
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"\n\n" + _jsonl("enc"))
    chat = "/v1/chat/completions"
    checked, errors = BatchInput.opened(path, chat, endpoint_refusals(backends, chat))
    assert (checked.lines, errors) == ([], [{"code": "model_not_supported", "param": "body.model", "line": 3,
                                             "message": embeddings_only("enc").message}])
    for served in (endpoint_refusals(backends, "/v1/embeddings"), {"enc"}):   # a model that serves it; a plain set
        checked, errors = BatchInput.opened(path, chat, served)
        assert errors == [] and len(checked.lines) == 3
        checked.close()
    checked, errors = BatchInput.opened(path, chat, endpoint_refusals({"chat": Chat()}, chat))
    assert [error["code"] for error in errors] == ["model_not_found"]   # an unknown model is still the 404's error


def test_a_file_whose_first_model_is_not_served_is_told_so_there_not_as_the_next_lines_mismatch(tmp_path):
    """QA217 F4: line 1 naming an unknown model and line 2 a served one read as "line 2's
    model 'tiny' is not the batch's 'nope'", telling the user to change the good line."""
    def opened(*models: str, bad_json: bool = False) -> list[dict]:
        path = tmp_path / "in.jsonl"
        lines = [line for model in models for line in _jsonl(model, 1).decode().splitlines()]
        lines = [line.replace('"r0"', f'"r{n}"') for n, line in enumerate(lines)]
        path.write_text("\n" + "\n".join(lines + (["not json"] if bad_json else [])))
        batch, errors = BatchInput.opened(path, "/v1/chat/completions", frozenset({"tiny"}))
        batch.close()
        return [(error["code"], error["line"], error.get("param")) for error in errors]

    assert opened("nope", "tiny", "tiny") == [("model_not_found", 2, "body.model")]
    # the first line's model served: a later line naming another is the mismatch it always was
    assert opened("tiny", "nope") == [("mismatched_model", 3, "body.model")]
    # a file with other bad lines lists them all, as before
    assert [code for code, _, _ in opened("nope", "tiny", bad_json=True)] == ["mismatched_model", "invalid_json_line"]
    assert opened("tiny", "tiny") == []
