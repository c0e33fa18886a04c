"""Reloading a running gateway's tenants from its config file (SIGHUP): keys, admins
and limits at once, the rest at the next start, a bad file changes nothing."""
from __future__ import annotations

import asyncio
import logging
import os
import signal
import time

import pytest

from gateway.app import build_app
from gateway.config import key_digest, load_config
from gateway.errors import ApiError
from gateway.reload import reload_tenants
from tests.gateway.serving import free_port

MODEL = '''[[models]]
name = "mock"
kind = "upstream"
litellm_model = "openai/gpt-4o-mini"
litellm_params = { mock_response = "hi" }
'''


LOCAL = '[[models]]\nname = "tiny"\nkind = "local"\npath = "tiny"\nnum_workers = 1\n[models.engine]\n'


def _tenant(name: str, key: str, extra: str = "") -> str:
    return f'\n[[tenants]]\nname = "{name}"\napi_key_sha256 = ["{key_digest(key)}"]\n{extra}'


def test_a_reload_applies_keys_admins_and_limits_and_names_what_waits_for_the_next_start(tmp_path, capsys):
    path = tmp_path / "gw.toml"
    path.write_text(MODEL + _tenant("a", "sk-a", "limits = { max_concurrent = 2 }")
                    + _tenant("gone", "sk-gone", "kv_share = 0.1"))
    state = build_app(load_config(path), config_path=str(path)).state.gateway
    kept_limiter = state.limiters["a"]
    path.write_text(MODEL.replace('"hi"', '"hello"')
                    + _tenant("a", "sk-a", "limits = { max_concurrent = 4 }\nadmin = true\nservice_tier = \"flex\"")
                    + _tenant("b", "sk-b", "weight = 2.0"))
    report = asyncio.run(reload_tenants(state, path))
    assert (report.added, report.removed, report.changed) == (("b",), ("gone",), ("a",))
    assert report.at_next_start == ("[[models]]",)   # weights and kv_shares: at once (no local model here)
    assert state.keys.authenticate("Bearer sk-b") == "b" and state.keys.authenticate("Bearer sk-a") == "a"
    with pytest.raises(ApiError) as refused:
        state.keys.authenticate("Bearer sk-gone")
    assert refused.value.status == 401
    assert state.config.is_admin("a") and [t.name for t in state.config.tenants] == ["a", "b"]
    assert state.config.service_tier("a", "default") == "flex"
    assert state.limiters["a"] is kept_limiter and kept_limiter.limits.max_concurrent == 4
    assert state.config.models[0].litellm_params == (("mock_response", "hi"),)   # models: at the next start
    assert capsys.readouterr().err.strip() == (
        f"stepahead: reloaded the tenants from {path}: 1 added (b), 1 removed (gone), 1 changed (a); "
        "at the next start: [[models]]")


@pytest.mark.parametrize("engine, reason", [
    ('policy = "lfu"\n', "engine option policy must be one of"),
    ('num_hot_blocks = -1\n', "engine option num_hot_blocks must be an integer >= 1"),
    # policy_options the policy refuses, found at the reload as at the start (QA75)
    ('policy = "predictive"\npolicy_options = { bogus_option = 1 }\n',
     "engine option policy_options does not suit policy 'predictive': bad predictive policy option"),
    ('policy = "lru"\npolicy_options = { pin_cap_frac = 0.2 }\n', "lru takes no options, got ['pin_cap_frac']"),
    ('policy_options = { pin_cap_frac = 5 }\n', "pin_cap_frac must lie in [0, 1]"),   # the default: predictive
    ('threads_per_worker = 1000000000000\n', "threads_per_worker must be at most 1024"),
])
def test_a_reload_whose_models_the_next_start_would_refuse_changes_nothing(tmp_path, caplog, engine, reason):
    """It used to report success ("at the next start: [[models]]"), and the next start
    with the same file then exited 2."""
    refusal = refused_reload_line(tmp_path, caplog, "", engine)
    assert refusal.startswith("cannot serve model 'tiny': ") and reason in refusal


def refused_reload_line(tmp_path, caplog, engine_before: str, engine: str) -> str:
    """A gateway on the tiny model (its `[models.engine]` `engine_before`, tenant "a")
    reloads a file whose engine options are `engine`, adding tenant "b": the reload must
    change nothing; the reason its log line gives (what follows "the next start would fail: ")."""
    path = tmp_path / "gw.toml"
    path.write_text(LOCAL + engine_before + _tenant("a", "sk-a"))
    state = build_app(load_config(path), config_path=str(path)).state.gateway
    path.write_text(LOCAL + engine + _tenant("a", "sk-a") + _tenant("b", "sk-b"))
    with caplog.at_level(logging.ERROR, logger="stepahead"):
        assert asyncio.run(reload_tenants(state, path)) is None
    assert [t.name for t in state.config.tenants] == ["a"]
    head = f"stepahead: the tenants were not reloaded from {path}: the next start would fail: "
    assert head in caplog.text
    return caplog.text.split(head, 1)[1].splitlines()[0]


@pytest.mark.parametrize("broken", ["[[tenants]]\nname = ", MODEL, None])
def test_a_file_that_does_not_load_changes_nothing(tmp_path, caplog, broken):
    path = tmp_path / "gw.toml"
    path.write_text(MODEL + _tenant("a", "sk-a"))
    state = build_app(load_config(path), config_path=str(path)).state.gateway
    running = state.config
    if broken is None:
        path.unlink()
    else:   # not TOML; no tenants at all
        path.write_text(broken)
    with caplog.at_level(logging.ERROR, logger="stepahead"):
        assert asyncio.run(reload_tenants(state, path)) is None
    assert state.config is running and state.keys.authenticate("Bearer sk-a") == "a"
    assert f"stepahead: the tenants were not reloaded from {path}: " in caplog.text


def test_a_reload_giving_a_tenant_a_budget_is_refused_while_the_spent_tokens_file_cannot_be_written(
        tmp_path, caplog, monkeypatch):
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("STEPAHEAD_SPENT_TOKENS", str(tmp_path / "a-file" / "spent.json"))   # under a file
    path = tmp_path / "gw.toml"
    path.write_text(MODEL + _tenant("a", "sk-a", "limits = { token_budget = 100 }") + _tenant("b", "sk-b"))
    state = build_app(load_config(path), config_path=str(path)).state.gateway
    running = state.config
    path.write_text(MODEL + _tenant("a", "sk-a", "limits = { token_budget = 100 }")
                    + _tenant("b", "sk-b", "limits = { token_budget = 50 }") + _tenant("c", "sk-c"))
    with caplog.at_level(logging.ERROR, logger="stepahead"):
        assert asyncio.run(reload_tenants(state, path)) is None
    assert state.config is running
    with pytest.raises(ApiError):
        state.keys.authenticate("Bearer sk-c")
    assert f"stepahead: the tenants were not reloaded from {path}: the tenants' spent tokens file " in caplog.text
    assert "the token budgets of 'b' would not hold across a restart" in caplog.text
    # a budget the running tenants had already is no reason to refuse (it was accepted at the start)
    path.write_text(MODEL + _tenant("a", "sk-a", "limits = { token_budget = 200 }") + _tenant("c", "sk-c"))
    report = asyncio.run(reload_tenants(state, path))
    assert (report.added, report.removed, report.changed) == (("c",), ("b",), ("a",))


def test_sighup_reloads_the_tenants_of_a_running_app(tmp_path, monkeypatch):
    """The handler the app's lifespan installs (in the main thread, as uvicorn runs it)."""
    from gateway.reload import reload_on_hangup

    path = tmp_path / "gw.toml"
    path.write_text(MODEL + _tenant("a", "sk-a"))
    app = build_app(load_config(path), config_path=str(path))
    state = app.state.gateway
    path.write_text(MODEL + _tenant("b", "sk-b"))
    backend_class, while_starting = type(state.backends["mock"]), []
    start = backend_class.start

    async def start_seeing_the_handler(backend) -> None:
        while_starting.append(signal.getsignal(signal.SIGHUP) != signal.SIG_DFL)
        await start(backend)

    monkeypatch.setattr(backend_class, "start", start_seeing_the_handler)

    async def serve_a_hangup() -> None:
        async with app.router.lifespan_context(app):
            os.kill(os.getpid(), signal.SIGHUP)
            deadline_s = time.monotonic() + 30
            while state.keys.tenant_for_key("sk-b") is None:
                assert time.monotonic() < deadline_s, "SIGHUP did not reload"
                await asyncio.sleep(0.01)

    asyncio.run(serve_a_hangup())
    assert while_starting == [True]   # installed before the models start: a SIGHUP then never ends it
    assert state.keys.tenant_for_key("sk-a") is None   # its key was taken away with it
    assert signal.getsignal(signal.SIGHUP) == signal.SIG_DFL   # removed when the app stopped
    assert reload_on_hangup(state, None) is None   # no event loop running: nothing to install


def test_serve_hands_the_config_file_to_the_app(monkeypatch, tmp_path):
    import uvicorn

    import gateway.app
    from gateway.cli import main

    path = tmp_path / "gw.toml"
    path.write_text(MODEL + _tenant("a", "sk-a"))
    built = {}
    real_build_app = gateway.app.build_app

    def spy(config, *, config_path=None, **others):
        built["config_path"] = config_path
        return real_build_app(config, config_path=config_path, **others)

    monkeypatch.setattr(gateway.app, "build_app", spy)
    monkeypatch.setattr(uvicorn.Server, "run", lambda server, sockets=None: setattr(server, "started", True))
    assert main(["serve", "--config", str(path), "--port", str(free_port())]) == 0
    assert built["config_path"] == str(path)


def test_a_sighup_before_the_app_starts_is_served_once_it_runs_and_one_while_it_stops_is_ignored(
        monkeypatch, tmp_path, capfd):
    """`serve --config` counts a SIGHUP from its first step on (the default action would
    end the gateway); the app's reload, once installed, serves it."""
    import uvicorn

    import gateway.app
    from gateway.cli import main
    from gateway.reload import HangupsBeforeStart

    path = tmp_path / "gw.toml"
    path.write_text(MODEL + _tenant("a", "sk-a"))
    real_build_app = gateway.app.build_app
    seen = {}

    def build_app_then_hang_up(config, *, config_path=None, **others):
        path.write_text(MODEL + _tenant("b", "sk-b"))   # changed after it was read
        os.kill(os.getpid(), signal.SIGHUP)
        seen["counted"] = signal.getsignal(signal.SIGHUP).num_seen
        return real_build_app(config, config_path=config_path, **others)

    async def serve_until_reloaded(app) -> None:
        state = app.state.gateway
        async with app.router.lifespan_context(app):
            deadline_s = time.monotonic() + 30
            while state.keys.tenant_for_key("sk-b") is None:
                assert time.monotonic() < deadline_s, "the SIGHUP seen before the start was not served"
                await asyncio.sleep(0.01)
        seen["after_stop"] = signal.getsignal(signal.SIGHUP)
        os.kill(os.getpid(), signal.SIGHUP)   # while the app stops: counted, not the end

    def run(server, sockets=None) -> None:
        asyncio.run(serve_until_reloaded(server.config.app))
        server.started = True

    monkeypatch.setattr(gateway.app, "build_app", build_app_then_hang_up)
    monkeypatch.setattr(uvicorn.Server, "run", run)
    assert main(["serve", "--config", str(path), "--port", str(free_port())]) == 0
    assert seen["counted"] == 1
    assert isinstance(seen["after_stop"], HangupsBeforeStart) and seen["after_stop"].num_seen == 1
    left = signal.getsignal(signal.SIGHUP)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    assert left == signal.SIG_DFL   # put back: main([...]) runs in a process that goes on (test_serve_hangup_h6)
    assert capfd.readouterr().err.count("stepahead: SIGHUP ignored: the gateway is stopping") == 1


def test_the_factory_path_counts_a_sighup_before_the_start_and_serves_it_once_the_app_runs(monkeypatch, tmp_path):
    """`uvicorn --factory gateway.app:build_app` with $STEPAHEAD_CONFIG: the factory runs
    before the app starts, in the main thread."""
    from gateway.reload import HangupsBeforeStart

    path = tmp_path / "gw.toml"
    path.write_text(MODEL + _tenant("a", "sk-a"))
    monkeypatch.setenv("STEPAHEAD_CONFIG", str(path))
    try:
        app = build_app()
        assert isinstance(signal.getsignal(signal.SIGHUP), HangupsBeforeStart)
        path.write_text(MODEL + _tenant("b", "sk-b"))
        os.kill(os.getpid(), signal.SIGHUP)   # counted, not the end
        state = app.state.gateway

        async def serve() -> None:
            async with app.router.lifespan_context(app):
                deadline_s = time.monotonic() + 30
                while state.keys.tenant_for_key("sk-b") is None:
                    assert time.monotonic() < deadline_s, "the SIGHUP counted before the start was not served"
                    await asyncio.sleep(0.01)

        asyncio.run(serve())
        assert isinstance(signal.getsignal(signal.SIGHUP), HangupsBeforeStart)   # put back as the app stopped
    finally:
        signal.signal(signal.SIGHUP, signal.SIG_DFL)


def test_a_reload_names_a_changed_host_or_port_unless_the_command_line_fixes_them(tmp_path, capsys):
    path = tmp_path / "gw.toml"
    path.write_text('[server]\nhost = "127.0.0.1"\nport = 8433\n' + MODEL + _tenant("a", "sk-a"))
    state = build_app(load_config(path), config_path=str(path)).state.gateway
    path.write_text('[server]\nhost = "0.0.0.0"\nport = 8434\n' + MODEL + _tenant("a", "sk-a"))
    report = asyncio.run(reload_tenants(state, path))
    assert report.at_next_start == ("[server] host", "[server] port")
    assert state.config.port == 8433   # still listening where it started
    assert capsys.readouterr().err.strip().endswith("; at the next start: [server] host, [server] port")

    # `serve --config FILE --port 9000 --capture-content`: what the flags fix is no change of the file's
    from gateway.cli import build_parser
    from gateway.serve_command import with_command_line_overrides

    args = build_parser().parse_args(["serve", "--config", str(path), "--port", "9000", "--capture-content"])
    path.write_text('[server]\nport = 8433\n' + MODEL + _tenant("a", "sk-a"))
    state = build_app(with_command_line_overrides(load_config(path), args), config_path=str(path)).state.gateway
    path.write_text('[server]\nport = 8434\n' + MODEL + _tenant("a", "sk-a"))
    report = asyncio.run(reload_tenants(state, path, lambda reloaded: with_command_line_overrides(reloaded, args)))
    assert report.at_next_start == ()   # neither the port nor capture_content
    assert asyncio.run(reload_tenants(state, path)).at_next_start == ("[tracing]", "[server] port")   # unfixed


def test_names_with_control_characters_are_escaped_in_the_reload_line(tmp_path, capsys):
    path = tmp_path / "gw.toml"
    path.write_text(MODEL + _tenant("a", "sk-a"))
    state = build_app(load_config(path), config_path=str(path)).state.gateway
    path.write_text(MODEL + _tenant("a", "sk-a") + _tenant('we\\"ird\\ten\\nant', "sk-w") + _tenant("ünï", "sk-u"))
    report = asyncio.run(reload_tenants(state, path))
    assert report.added == ('we"ird\ten\nant', "ünï")
    [line] = capsys.readouterr().err.splitlines()   # one line, whatever the names
    assert line.endswith(": 2 added ('we\"ird\\ten\\nant', ünï), 0 removed, 0 changed")


def test_a_sighup_to_a_gateway_started_without_a_config_file_is_logged_and_never_ends_it(caplog):
    from gateway.config import parse_config
    from gateway.reload import NOTHING_TO_RELOAD, HangupsBeforeStart

    config = parse_config({"models": [{"name": "mock", "kind": "upstream", "litellm_model": "openai/gpt-4o-mini",
                                       "litellm_params": {"mock_response": "hi"}}],
                           "tenants": [{"name": "a", "api_key_sha256": [key_digest("sk-a")]}]})
    app = build_app(config)   # no config_path
    guard = HangupsBeforeStart.install()   # as `stepahead serve` installs (and a failing test survives)
    try:
        async def serve_a_hangup() -> None:
            async with app.router.lifespan_context(app):
                os.kill(os.getpid(), signal.SIGHUP)
                deadline_s = time.monotonic() + 5
                while NOTHING_TO_RELOAD not in caplog.text:
                    assert time.monotonic() < deadline_s, "the SIGHUP was not answered"
                    await asyncio.sleep(0.01)
                assert app.state.gateway.is_ready   # still serving

        with caplog.at_level(logging.WARNING, logger="stepahead"):
            asyncio.run(serve_a_hangup())
        assert guard.num_seen == 0   # the app's handler took it, not the guard
        assert caplog.text.count(NOTHING_TO_RELOAD) == 1
    finally:
        signal.signal(signal.SIGHUP, signal.SIG_DFL)


def test_serve_without_a_config_file_counts_a_sighup_from_its_first_step(monkeypatch, tmp_path):
    import uvicorn

    import gateway.app
    from gateway.cli import main
    from gateway.reload import HangupsBeforeStart

    seen = {}
    real_build_app = gateway.app.build_app

    def build_app_seeing_the_handler(config, **options):
        seen["handler"] = signal.getsignal(signal.SIGHUP)
        return real_build_app(config, **options)

    monkeypatch.setattr(gateway.app, "build_app", build_app_seeing_the_handler)
    monkeypatch.setattr(uvicorn.Server, "run", lambda server, sockets=None: setattr(server, "started", True))
    monkeypatch.setattr("gateway.serve_command.needs_fork_server", lambda config: False)   # nothing runs here
    assert main(["serve", "--model", "tiny", "--port", str(free_port())]) == 0
    assert isinstance(seen["handler"], HangupsBeforeStart)   # a SIGHUP then is counted, not the end
    left = signal.getsignal(signal.SIGHUP)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    assert left == signal.SIG_DFL   # the handler it found: main([...]) is no process's last step
