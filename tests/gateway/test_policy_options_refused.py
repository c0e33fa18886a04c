"""A `policy_options` value of the wrong type or out of range is a bad config (QA156 F1,
F2): `stepahead serve` refuses it in one line before binding (exit 2), and a SIGHUP
reload that carries it changes nothing. `cold_ttl_s = "abc"` used to pass both and then
crash the worker on every tool-call reply. Two knobs that contradict each other are
refused the same way (FI66: `cold_ttl_s` above `max_ttl_s`)."""
from __future__ import annotations

import pytest

from gateway.cli import main
from tests.gateway.serving import free_port
from tests.gateway.test_reload import LOCAL, _tenant, refused_reload_line

CANNOT = "cannot serve model 'tiny': engine option policy_options does not suit policy"


TTL_PAIR = ("'ttl': policy_options.cold_ttl_s must be at most policy_options.max_ttl_s (every pin is capped there), "
            "not {} > {}")


@pytest.mark.parametrize("knobs, reason", [
    ('cold_ttl_s = "abc"', "'ttl': policy_options.cold_ttl_s must be a number >= 0 (and finite), not 'abc'"),
    ("cold_ttl_s = 900, max_ttl_s = 600", TTL_PAIR.format(900, 600)),   # a pair against each other (FI66)
])
def test_serve_refuses_a_bad_ttl_knob_in_one_line(monkeypatch, tmp_path, capsys, knobs, reason):
    import uvicorn

    # never serve: the old code took the file and served it (uvicorn's run returned 0 here)
    monkeypatch.setattr(uvicorn.Server, "run", lambda server, sockets=None: setattr(server, "started", True))
    path = tmp_path / "ttl.toml"
    path.write_text(LOCAL + f'policy = "ttl"\npolicy_options = {{ {knobs} }}\n' + _tenant("a", "sk-a"))
    assert main(["serve", "--config", str(path), "--port", str(free_port())]) == 2
    assert capsys.readouterr().err == f"stepahead: {CANNOT} {reason}\n"


@pytest.mark.parametrize("engine, reason", [
    ('policy = "ttl"\npolicy_options = { cold_ttl_s = "abc" }\n',
     "'ttl': policy_options.cold_ttl_s must be a number >= 0 (and finite), not 'abc'"),
    ('policy = "ttl"\npolicy_options = { max_ttl_s = -1 }\n',
     "'ttl': policy_options.max_ttl_s must be a number > 0 (and finite), not -1"),
    ('policy = "predictive"\npolicy_options = { prefetch = "false" }\n',
     "'predictive': policy_options.prefetch must be true or false, not 'false'"),
    ('policy_options = { max_pin_s = "x" }\n',   # the default policy: predictive
     "'predictive': policy_options.max_pin_s must be a number >= 0 (and finite), not 'x'"),
    ('policy_options = { accuracy_min_events = -1 }\n',
     "'predictive': policy_options.accuracy_min_events must be an integer >= 0, not -1"),
    ('policy = "ttl"\npolicy_options = { cold_ttl_s = 2.0, max_ttl_s = 1.0 }\n', TTL_PAIR.format(2.0, 1.0)),
    ('policy_options = { prefetch_quantile = 0.95 }\n',
     "'predictive': policy_options.prefetch_quantile must be at most policy_options.prefetch_until_quantile "
     "(a prefetch is looked at from the one until the other), not 0.95 > 0.9"),
])
def test_a_reload_carrying_a_bad_policy_knob_is_refused(tmp_path, caplog, engine, reason):
    refusal = refused_reload_line(tmp_path, caplog, 'policy = "ttl"\npolicy_options = { cold_ttl_s = 2.0 }\n', engine)
    assert refusal.startswith(f"{CANNOT} {reason}")
