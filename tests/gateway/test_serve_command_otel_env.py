"""`stepahead serve` checks the OTEL_* variables the tracer reads as it checks the file: an
OTLP protocol it cannot send is one `bad config` line and exit 2, before anything starts
(it was a traceback from the app's start and exit 3)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gateway.config import key_digest

STORE_ENV = ("STEPAHEAD_TRACE_DB", "STEPAHEAD_PREDICTOR_DIR", "STEPAHEAD_RESPONSES_DB", "STEPAHEAD_SPENT_TOKENS")
CONFIG = ("[[models]]\nname = 'mock'\nkind = 'upstream'\nlitellm_model = 'openai/gpt-4o-mini'\n"
          "litellm_params = { mock_response = 'hi' }\n"
          f"[[tenants]]\nname = 't'\napi_key_sha256 = ['{key_digest('sk-t')}']\n")


@pytest.mark.parametrize("name", ["OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"])
def test_serve_refuses_an_unsupported_otlp_protocol_variable_in_one_line(tmp_path: Path, name):
    config = tmp_path / "gw.toml"
    config.write_text(CONFIG)
    done = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "serve", "--config", str(config), "--port", "0"],
        capture_output=True, text=True, timeout=120,
        env={"LITELLM_LOCAL_MODEL_COST_MAP": "True", "PATH": "/usr/bin:/bin",
             "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
             "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", name: "http/json",
             **{env: str(tmp_path / env) for env in STORE_ENV}})
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    assert done.stderr == (f"stepahead: bad config: {name} must be one of ('http/protobuf', 'grpc'), "
                           "not 'http/json'\n")
