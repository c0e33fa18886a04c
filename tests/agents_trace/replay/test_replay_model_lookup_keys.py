"""`stepahead replay` without `--model` asks the gateway's /v1/models for one (QA221 F5):
with `--api-key` first, then with the keys `--tenant-key` / `--tenant-keys-file` give the
trace's tenants, so keys covering every tenant are enough, and `--api-key` may then be left
out. When every key is refused, the one error line still says to pass --model; a tenant
with no key while `--api-key` is left out is one error line before anything connects.
`--help` says what `--max-input-tokens` / `--max-output-tokens` default to (QA221 F4)."""
from __future__ import annotations

import json
import os

import pytest

from gateway.cli import main
from tests.agents_trace.replay.fake_gateway import start_fake_gateway


@pytest.fixture
def keyed_gateway():
    gateway = start_fake_gateway(keys=frozenset({"K-acme", "K-beta"}))
    yield gateway
    gateway.stop()


def _replay(tmp_path, gateway, *flags: str) -> int:
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"t": i * 0.01, "tenant": tenant, "input_tokens": 4, "output_tokens": 1})
                             + "\n" for i, tenant in enumerate(("acme", "beta"))))
    keys = tmp_path / "keys.txt"
    keys.write_text("acme=K-acme\nbeta=K-beta\n")
    os.chmod(keys, 0o600)
    return main(["replay", str(trace), "--base-url", gateway.base_url, "--tenant-keys-file", str(keys),
                 "--no-progress", "--json", *flags])


def test_a_keys_file_covering_the_trace_is_enough_without_api_key(tmp_path, keyed_gateway, capsys):
    assert _replay(tmp_path, keyed_gateway) == 0
    assert keyed_gateway.model_lookups[0] == "K-acme" and len(keyed_gateway.bodies) == 2
    assert json.loads(capsys.readouterr().out)["total"]["errors"] == 0


def test_a_refused_api_key_falls_back_to_the_tenants_keys(tmp_path, keyed_gateway, capsys):
    assert _replay(tmp_path, keyed_gateway, "--api-key", "unused") == 0
    assert keyed_gateway.model_lookups[:2] == ["unused", "K-acme"] and len(keyed_gateway.bodies) == 2


def test_a_refused_api_key_with_model_is_checked_with_a_tenants_key(tmp_path, keyed_gateway):
    assert _replay(tmp_path, keyed_gateway, "--api-key", "unused", "--model", "m") == 0
    assert keyed_gateway.model_lookups[:2] == ["unused", "K-acme"]


def test_every_key_refused_is_one_line_that_still_says_pass_model(tmp_path, capsys):
    gateway = start_fake_gateway(keys=frozenset({"other"}))
    try:
        assert _replay(tmp_path, gateway, "--api-key", "unused") == 2
    finally:
        gateway.stop()
    assert gateway.model_lookups == ["unused", "K-acme", "K-beta"] and gateway.bodies == []
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: cannot list the models of {gateway.base_url} (is the gateway up, and one of "
                           "the 3 keys it was asked with right? or pass --model): ClientResponseError: 401")


def test_without_api_key_a_tenant_with_no_key_is_one_error_line(tmp_path, capsys):
    gateway = start_fake_gateway()
    try:
        trace = tmp_path / "t.jsonl"
        trace.write_text("".join(json.dumps({"t": i, "tenant": t, "input_tokens": 4, "output_tokens": 1}) + "\n"
                                 for i, t in enumerate(("acme", "beta", "gamma"))))
        status = main(["replay", str(trace), "--base-url", gateway.base_url, "--tenant-key", "acme=K",
                       "--no-progress"])
    finally:
        gateway.stop()
    assert status == 2 and gateway.model_lookups == [] and gateway.bodies == []
    assert capsys.readouterr().err == ("error: --api-key is needed: 2 of the trace's tenants have no --tenant-key "
                                       "or --tenant-keys-file key (the first: 'beta')\n")


def test_help_says_the_token_caps_default_to_the_traces_own(capsys):
    with pytest.raises(SystemExit):
        main(["replay", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "cap generated tokens (default: no cap, the trace's own output_tokens)" in text
    assert "default: no cut, the trace's own lengths)" in text
