"""The access log keeps credentials out: known answers, and a served gateway's own log."""
import logging
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from gateway.access_log import REDACTED, QueryRedaction, redacted_path
from tests.gateway.serving import free_port, wait_until_healthy
from tests.gateway.serving import STORE_ENV


@pytest.mark.parametrize("path, expected", [
    ("/v1/models", "/v1/models"),
    ("/v1/models?limit=2&after=x", "/v1/models?limit=2&after=x"),
    ("/v1/models?api_key=sk-1", f"/v1/models?api_key={REDACTED}"),
    ("/ui?limit=2&Api-Key=sk-1&access_token=t", f"/ui?limit=2&Api-Key={REDACTED}&access_token={REDACTED}"),
    ("/x?api%5Fkey=sk-1&key", f"/x?api%5Fkey={REDACTED}&key"),   # an encoded name; a name without a value
])
def test_credential_named_query_values_are_redacted_and_the_rest_kept(path, expected):
    assert redacted_path(path) == expected


def test_the_filter_rewrites_uvicorns_access_record_and_lets_it_through():
    record = logging.LogRecord("uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d',
                               ("127.0.0.1:5", "GET", "/v1/models?token=abc", "1.1", 401), None)
    assert QueryRedaction().filter(record)
    assert record.getMessage() == f'127.0.0.1:5 - "GET /v1/models?token={REDACTED} HTTP/1.1" 401'


def test_a_served_gateway_never_writes_a_key_sent_in_the_url_to_its_log():
    """On a local model alone (litellm, which filters uvicorn's access log its own way when
    an upstream model loads it, is not imported)."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "serve", "--model", "tiny", "--workers", "1", "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
             **{name: os.environ[name] for name in (*STORE_ENV, "STEPAHEAD_CACHE_DIR") if name in os.environ}})
    try:
        wait_until_healthy(port, process, timeout_s=120)
        reply = httpx.get(f"http://127.0.0.1:{port}/v1/models?api_key=sk-in-the-url")
        assert reply.status_code == 401
    finally:
        process.terminate()
        output, _ = process.communicate(timeout=60)
    assert f"/v1/models?api_key={REDACTED}" in output   # the access line is there, its key is not
    assert "sk-in-the-url" not in output
