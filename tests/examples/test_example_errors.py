"""Every example ends a wrong key, an unknown model or an unreachable gateway with one line on
stderr that says what failed and what to check, and exit status 1, not a traceback; they all
set the same retry count (QA219 F4). batch_requests.py prints the batch's full id when it
creates it, and a gateway lost mid-batch ends it with one line naming the batch and how to
follow it again (QA219 F3). No gateway runs here: the examples' main() runs in-process against
a closed port or a stub that answers as the gateway does; one run goes by path, as users run them."""
from __future__ import annotations

import ast
import importlib.util
import json
import socket
import subprocess
import sys
import threading
from contextlib import contextmanager, nullcontext
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SCRIPTS = ("openai_agent_loop", "langchain_agent", "openai_agents_sdk", "batch_requests")
NEEDS = {"langchain_agent": "langchain_openai", "openai_agents_sdk": "agents"}
BATCH_ID = "batch_0123456789abcdef0123456789abcdef"
BAD_KEY = {"message": "Invalid API key provided.", "type": "invalid_request_error", "code": "invalid_api_key"}
NO_MODEL = {"message": "The model 'nosuch' does not exist. This gateway serves: tiny.",
            "type": "invalid_request_error", "code": "model_not_found"}


class _Stub(BaseHTTPRequestHandler):
    """Answers as the gateway would, by `server.mode`: 'bad_key' refuses every key (401);
    'no_model' serves model 'tiny' and 404s every generation; 'drop_batch' creates a batch,
    then drops the connection when it is polled (a gateway stopped mid-batch)."""

    def log_message(self, *args):
        pass

    def _send(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _answer(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        mode, path = self.server.mode, self.path.split("?")[0]
        if mode == "bad_key":
            return self._send(401, {"error": {**BAD_KEY, "param": None}})
        if path == "/v1/models":
            return self._send(200, {"object": "list", "data": [{"id": "tiny", "object": "model", "created": 0,
                                                                 "owned_by": "stepahead"}]})
        if mode == "no_model":
            return self._send(404, {"error": {**NO_MODEL, "param": "model"}})
        if path == "/v1/files":
            return self._send(200, {"id": "file-1", "object": "file", "bytes": 1, "created_at": 0,
                                    "filename": "questions.jsonl", "purpose": "batch", "status": "processed"})
        if path == "/v1/batches":
            return self._send(200, {"id": BATCH_ID, "object": "batch", "endpoint": "/v1/chat/completions",
                                    "input_file_id": "file-1", "completion_window": "24h", "created_at": 0,
                                    "status": "in_progress",
                                    "request_counts": {"total": 2, "completed": 0, "failed": 0}})
        self.close_connection = True   # polled: no answer at all, as from a gateway that stopped

    do_GET = do_POST = _answer


@contextmanager
def stub(mode: str):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Stub)
    server.mode = mode
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def closed_port_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}/v1"


def run_main(monkeypatch, capsys, script: str, base_url: str, *extra: str) -> tuple[int, str, str]:
    """The example's main() in-process, as `python examples/<script>.py --base-url ... ...` runs it."""
    if script in NEEDS:
        pytest.importorskip(NEEDS[script], reason=f"{NEEDS[script]} is not installed")
    monkeypatch.syspath_prepend(str(EXAMPLES))   # as for a script run by path: its folder first
    spec = importlib.util.spec_from_file_location(f"_example_{script}", EXAMPLES / f"{script}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(sys, "argv", [str(EXAMPLES / f"{script}.py"), "--base-url", base_url,
                                      "--api-key", "sk-test", *extra])
    code = module.main()
    out, err = capsys.readouterr()
    return code, out, err


def _one_line(err: str, script: str) -> str:
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{script}: "), err
    return lines[0]


@pytest.mark.parametrize("script", SCRIPTS)
def test_no_gateway_is_one_line_naming_the_url(monkeypatch, capsys, script):
    url = closed_port_url()
    code, out, err = run_main(monkeypatch, capsys, script, url)
    line = _one_line(err, script)
    assert code == 1 and out == ""
    assert f"cannot reach the gateway at {url}" in line and "`stepahead serve` running" in line
    assert "--base-url" in line


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_wrong_key_is_one_line_saying_check_the_key(monkeypatch, capsys, script):
    with stub("bad_key") as url:
        code, out, err = run_main(monkeypatch, capsys, script, url)
    line = _one_line(err, script)
    assert code == 1 and out == ""
    assert f"the gateway at {url} refused the API key: Invalid API key provided." in line
    assert "Check --api-key" in line


@pytest.mark.parametrize("script", [s for s in SCRIPTS if s != "batch_requests"])   # a batch reports it itself
def test_an_unknown_model_is_one_line_saying_check_the_model(monkeypatch, capsys, script):
    with stub("no_model") as url:
        code, out, err = run_main(monkeypatch, capsys, script, url, "--model", "nosuch")
    line = _one_line(err, script)
    assert code == 1 and out == ""
    assert NO_MODEL["message"] in line and "Check --model" in line and f"{url}/models" in line


@pytest.mark.parametrize("script", [s for s in SCRIPTS if s != "batch_requests"])
def test_a_base_url_without_v1_is_told_to_end_in_v1(monkeypatch, capsys, script):
    """QA232 F2: the hint named `<base>/models`, the very request that was not found."""
    with stub("no_model") as url:
        base = url.removesuffix("/v1")
        code, out, err = run_main(monkeypatch, capsys, script, base, "--model", "nosuch")
    line = _one_line(err, script)
    assert code == 1 and f"--base-url should end in /v1 ({base}/v1)" in line and f"{base}/models" not in line


def test_batch_id_is_printed_whole_and_a_lost_gateway_says_how_to_follow_it(monkeypatch, capsys):
    with stub("drop_batch") as url:
        code, out, err = run_main(monkeypatch, capsys, "batch_requests", url, "--count", "2")
    assert code == 1 and out == "" and "Traceback" not in err
    lines = [line.split("\r")[-1] for line in err.strip().splitlines()]   # the progress bar redraws with \r
    assert lines[0] == f"batch_requests: created {BATCH_ID} (follow it again with --batch-id {BATCH_ID})"
    last = lines[-1]
    assert last.startswith(f"batch_requests: cannot reach the gateway at {url}")
    assert f"--batch-id {BATCH_ID}" in last and f"client.batches.retrieve('{BATCH_ID}')" in last
    assert "next start" in last


def test_every_example_client_sets_the_shared_retry_count():
    """OpenAI(...), AsyncOpenAI(...) and ChatOpenAI(...) all pass max_retries=MAX_RETRIES (from _errors)."""
    found = {}
    for script in SCRIPTS:
        for node in ast.walk(ast.parse((EXAMPLES / f"{script}.py").read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("OpenAI", "AsyncOpenAI", "ChatOpenAI"):
                retries = [ast.unparse(k.value) for k in node.keywords if k.arg == "max_retries"]
                found.setdefault(script, []).append(retries)
    assert set(found) == set(SCRIPTS)
    assert all(retries == ["MAX_RETRIES"] for calls in found.values() for retries in calls), found


@pytest.mark.parametrize(("script", "mode"), [("openai_agent_loop", None), ("openai_agents_sdk", "no_model")])
def test_run_by_path_it_is_one_line_and_nothing_else(script, mode):
    """As users run them: `python examples/<script>.py` finds examples/_errors.py, and nothing else
    writes to stderr (the Agents SDK logs a failed request itself; pytest's own log capture
    would hide that from an in-process run)."""
    if script in NEEDS:
        pytest.importorskip(NEEDS[script], reason=f"{NEEDS[script]} is not installed")
    with (stub(mode) if mode else nullcontext(closed_port_url())) as url:
        done = subprocess.run([sys.executable, str(EXAMPLES / f"{script}.py"), "--base-url", url, "--api-key",
                               "sk-test", "--model", "nosuch"], capture_output=True, text=True, timeout=60, cwd="/")
    assert (done.returncode, done.stdout) == (1, "")
    expected = f"cannot reach the gateway at {url}" if mode is None else f"not found at {url}"
    assert done.stderr.startswith(f"{script}: {expected}") and done.stderr.count("\n") == 1, done.stderr
