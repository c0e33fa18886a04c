"""A `--base-url` the replay cannot send to is refused before anything connects, with one
line and exit status 2, with `--model` as without: with `--model` it once passed the
pre-check (aiohttp's InvalidURL is a ValueError, taken for a body that is not JSON), and
the replay paced the whole trace through errors. A gateway that cannot list its models
is not told to "pass --model" when `--model` was passed."""
from __future__ import annotations

import asyncio

import aiohttp
import pytest

import agents_trace.replay.cli as replay_cli
from agents_trace.replay.model_lookup import GatewayUnreachable, check_model
from gateway.cli import main


@pytest.mark.parametrize("base_url,message", [
    ("localhost", "--base-url must be an http:// or https:// URL with a host, such as http://127.0.0.1:8000, "
                  "got 'localhost'"),
    ("127.0.0.1:8000", "--base-url must be an http:// or https:// URL with a host"),
    ("ftp://127.0.0.1:8000", "--base-url must be an http:// or https:// URL with a host"),
    ("http://", "--base-url must be an http:// or https:// URL with a host"),
    ("http://127.0.0.1:99999", "--base-url must be an http:// or https:// URL, such as http://127.0.0.1:8000, "
                               "got 'http://127.0.0.1:99999' (Port out of range 0-65535)"),
    ("http://127.0.0.1:abc", "--base-url must be an http:// or https:// URL"),
    ("http://127.0.0.1:0", "--base-url's port must be from 1 to 65535, got 'http://127.0.0.1:0'"),
])
@pytest.mark.parametrize("model", [[], ["--model", "m"]])
def test_a_malformed_base_url_is_refused_before_the_replay(tmp_path, capsys, base_url, message, model):
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(f'{{"t": {t}, "input_tokens": 4, "output_tokens": 1}}\n' for t in (0, 30, 60)))
    assert main(["replay", str(trace), "--base-url", base_url, "--api-key", "k", "--no-progress", *model]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith(f"error: {message}") and captured.err.count("\n") == 1
    assert captured.out == ""


@pytest.mark.parametrize("base_url", ["http://127.0.0.1:8000", "https://gw.example/v1/", "http://[::1]:8000"])
def test_a_well_formed_base_url_passes(base_url):
    assert replay_cli.base_url_problem(base_url) is None


def test_the_model_check_calls_an_invalid_url_unreachable_not_a_body_without_json():
    async def check() -> None:
        async with aiohttp.ClientSession() as session:
            await check_model(session, "localhost", "k", "m")

    with pytest.raises(GatewayUnreachable, match="InvalidUrlClientError|InvalidURL"):
        asyncio.run(check())


@pytest.mark.parametrize("model,hinted", [(None, True), ("m", False)])
def test_a_model_list_that_fails_suggests_model_only_without_one(tmp_path, capsys, monkeypatch, model, hinted):
    async def failing_replay(records, header, options):
        raise aiohttp.ClientPayloadError("the models list broke off")

    monkeypatch.setattr(replay_cli, "replay", failing_replay)
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"t": 0, "input_tokens": 4, "output_tokens": 1}\n')
    flags = [] if model is None else ["--model", model]
    assert main(["replay", str(trace), "--base-url", "http://127.0.0.1:9", "--api-key", "k", "--no-progress",
                 *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot list the models of http://127.0.0.1:9 (is the gateway up, and the key right?")
    assert ("or pass --model" in err) == hinted and err.count("\n") == 1
