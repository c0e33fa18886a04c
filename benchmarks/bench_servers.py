"""The servers a benchmark starts: a fake OpenAI upstream, `stepahead serve` in its own
process with its state in the benchmark's scratch directory, a gateway app in this
process (`InProcessGateway`), and the config tables and helpers around them (ports,
readiness, stopping).

    python benchmarks/bench_servers.py --serve-fake PORT [--latency-ms 20]

serves the fake upstream (what `spawn_fake_upstream` runs). Invariant: a benchmark's
gateway never reads or writes the user's own data directory (`gateway_state_env`).
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# NOTE: LiteLLM's proxy refuses weak master keys; a fixed, strong-looking key suits both.
API_KEY = "sk-" + hashlib.sha256(b"stepahead-gateway-bench").hexdigest()[:40]
REPLY = {"id": "chatcmpl-bench", "object": "chat.completion", "created": 1, "model": "fake",
         "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok " * 16},
                      "finish_reason": "stop"}],
         "usage": {"prompt_tokens": 50, "completion_tokens": 16, "total_tokens": 66}}


def fake_upstream_app(latency_s: float):
    body = json.dumps(REPLY).encode()

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body"):
            pass
        await asyncio.sleep(latency_s)
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body})
    return app


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_ready(url: str, process: subprocess.Popen, timeout_s: float = 120.0, log_path: Path | None = None,
               hint: str = "") -> None:
    import httpx
    deadline_s = time.monotonic() + timeout_s
    while time.monotonic() < deadline_s:
        if process.poll() is not None:
            tail = log_path.read_text(errors="replace").strip().splitlines()[-5:] if log_path else []
            raise RuntimeError(f"{process.args[:3]} exited with {process.returncode}"
                               + "".join(f"\n  | {line}" for line in tail) + (f"\n{hint}" if hint else ""))
        try:
            if httpx.get(url, timeout=1.0).status_code < 500:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.25)
    raise RuntimeError(f"{url} did not come up")


def fake_model_toml(name: str, upstream_url: str, passthrough: bool) -> str:
    """A `[[models]]` table for the fake upstream (through litellm, or passed through)."""
    return f"""
[[models]]
name = "{name}"
kind = "upstream"
litellm_model = "openai/fake"
api_base = "{upstream_url}/v1"
api_key_env = "BENCH_UPSTREAM_KEY"
passthrough = {str(passthrough).lower()}
"""


def bench_tenant_toml(admin: bool = False) -> str:
    """The `[[tenants]]` table of the tenant whose key is API_KEY."""
    digest = hashlib.sha256(API_KEY.encode()).hexdigest()
    return f"""
[[tenants]]
name = "bench"
api_key_sha256 = ["{digest}"]
admin = {str(admin).lower()}
"""


def spawn(args: list[str], env: dict, log_path: Path) -> subprocess.Popen:
    log = open(log_path, "wb")
    return subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)


def gateway_state_env(workdir: Path) -> dict[str, str]:
    """Where a benchmark's gateway keeps its traces, forecasts, stored responses and spent
    tokens: under `workdir`, never in the user's own data directory (whose trace store and
    predictor a benchmark would otherwise fill with its sessions, and whose size it would
    measure)."""
    return {"STEPAHEAD_TRACE_DB": str(workdir / "traces.sqlite3"),
            "STEPAHEAD_PREDICTOR_DIR": str(workdir / "predictor"),
            "STEPAHEAD_RESPONSES_DB": str(workdir / "responses.sqlite3"),
            "STEPAHEAD_SPENT_TOKENS": str(workdir / "spent_tokens.json")}


def server_env(workdir: Path) -> dict:
    """The servers' environment: litellm's bundled cost map (no network), the fake upstream's
    key, and the gateway's state under `workdir`."""
    return dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True", BENCH_UPSTREAM_KEY="sk-upstream",
                PYTHONPATH=str(ROOT), **gateway_state_env(workdir))


def spawn_fake_upstream(port: int, latency_ms: float, env: dict, workdir: Path) -> subprocess.Popen:
    return spawn([sys.executable, str(Path(__file__).resolve()), "--serve-fake", str(port),
                  "--latency-ms", str(latency_ms)], env, workdir / "fake.log")


def stop_all(processes: list[subprocess.Popen], workdir: Path) -> None:
    """Terminate the servers (killed if one is still up 20 s later), remove their files."""
    for process in processes:
        process.terminate()
    for process in processes:
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
    shutil.rmtree(workdir, ignore_errors=True)


@contextmanager
def fresh_gateway(config_toml: str, prefix: str) -> Iterator[str]:
    """`stepahead serve` on `config_toml` in a scratch directory of its own (its state there
    too, `server_env`), once ready: yields its base URL, then stops it and removes the
    directory."""
    workdir = Path(tempfile.mkdtemp(prefix=prefix))
    (workdir / "stepahead.toml").write_text(config_toml)
    port = free_port()
    process = spawn([sys.executable, "-m", "gateway.cli", "serve", "--config", str(workdir / "stepahead.toml"),
                     "--port", str(port), "--log-level", "error"], server_env(workdir), workdir / "log")
    try:
        wait_ready(f"http://127.0.0.1:{port}/health", process, timeout_s=600)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_all([process], workdir)


def rounded(result: dict) -> dict:
    """A result's floats to 4 decimals, for printing."""
    return {key: round(value, 4) if isinstance(value, float) else value for key, value in result.items()}


def medians(runs: dict[str, list[dict]]) -> dict[str, dict]:
    """Per mode, the median of each number over its rounds (the keys of its first round)."""
    return {mode: {key: statistics.median(run[key] for run in mode_runs) for key in mode_runs[0]}
            for mode, mode_runs in runs.items()}


async def start_batch(client, jsonl: bytes) -> str:
    """Upload `jsonl` (Batch API lines for chat completions) through `client` (an
    httpx.AsyncClient on a gateway) and start a batch of it; the batch's id."""
    upload = (await client.post("/v1/files", data={"purpose": "batch"}, files={"file": ("b.jsonl", jsonl)})).json()
    body = {"input_file_id": upload["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h"}
    return (await client.post("/v1/batches", json=body)).json()["id"]


async def batch_outcome(client, batch_id: str, started_s: float) -> dict:
    """Once the batch has ended (completed, failed, cancelled or expired): its wall time
    since `started_s` (a `time.perf_counter()`) and its completed requests."""
    while (batch := (await client.get(f"/v1/batches/{batch_id}")).json())["status"] not in (
            "completed", "failed", "cancelled", "expired"):
        await asyncio.sleep(0.2)
    return {"batch_s": time.perf_counter() - started_s, "batch_completed": batch["request_counts"]["completed"]}


class InProcessGateway:
    """A gateway in this process on a free port (uvicorn in a thread)."""

    def __init__(self, app):
        import uvicorn
        from gateway.config import DEFAULT_KEEP_ALIVE_S

        self.port = free_port()
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port,
                                                    log_level="warning", lifespan="on",
                                                    timeout_keep_alive=DEFAULT_KEEP_ALIVE_S))
        self.thread = threading.Thread(target=self.server.run, name="gateway-uvicorn", daemon=True)

    def __enter__(self) -> "InProcessGateway":
        self.thread.start()
        deadline = time.monotonic() + 600
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the gateway did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=60)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def main() -> int:
    sys.path.insert(0, str(ROOT))   # run as a script, by path: benchmarks/ alone is on sys.path
    from benchmarks.script_args import benchmark_parser
    from cache.cli_args import non_negative_float, positive_int

    parser = benchmark_parser(__doc__, description="The fake OpenAI upstream of the benchmarks.")
    parser.add_argument("--serve-fake", type=positive_int, required=True, metavar="PORT",
                        help="serve the fake upstream on this TCP port of 127.0.0.1")
    parser.add_argument("--latency-ms", type=non_negative_float, default=20.0,
                        help="milliseconds each reply waits before it is sent")
    args = parser.parse_args()
    import uvicorn
    uvicorn.run(fake_upstream_app(args.latency_ms / 1e3), host="127.0.0.1", port=args.serve_fake,
                log_level="error", access_log=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
