import hashlib
from pathlib import Path

import pytest

from gateway.config import (ConfigError, LocalModelConfig, UpstreamModelConfig, default_config,
                            demo_key_from, key_digest, load_config, parse_config)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "stepahead.toml"


def test_load_config_reads_the_example(monkeypatch):
    monkeypatch.setenv("SUPPORT_BOT_API_KEY", "sk-support")
    config = load_config(EXAMPLE)
    local, upstream, vllm = config.models
    assert isinstance(local, LocalModelConfig) and local.num_workers == 2
    assert dict(local.engine_options)["block_size"] == 16
    assert isinstance(upstream, UpstreamModelConfig) and upstream.api_key_env == "OPENAI_API_KEY"
    assert vllm.resolved_api_base() == "http://10.0.0.5:8000/v1"
    research, support = config.tenants
    assert research.limits.token_budget == 50_000_000 and research.kv_share == 0.25
    assert support.key_digests == (key_digest("sk-support"),)
    assert "sk-support" not in repr(config)


def test_default_config_serves_embedded_model_for_demo_tenant():
    config = default_config("sk-demo")
    [model] = config.models
    assert model.path == "smollm2" and model.num_workers == 2
    assert config.tenants[0].key_digests == (key_digest("sk-demo"),)


def test_a_flex_tenants_requests_run_flex_whatever_they_ask():
    config = parse_config({**_base(service_tier="flex"), "tenants": [
        {"name": "t", "api_key_sha256": [key_digest("k")], "service_tier": "flex"},
        {"name": "u", "api_key_sha256": [key_digest("u")]}]})
    assert [config.service_tier("t", asked) for asked in (None, "default", "flex")] == ["flex"] * 3
    assert [config.service_tier("u", asked) for asked in (None, "default", "flex")] == [None, "default", "flex"]


def _base(**tenant) -> dict:
    return {"models": [{"name": "m", "kind": "upstream", "litellm_model": "openai/x"}],
            "tenants": [{"name": "t", "api_key_sha256": [key_digest("k")], **tenant}]}


@pytest.mark.parametrize("change,needle", [
    (lambda d: d["tenants"][0].update(api_key_sha256=["plaintext"]), "sha256"),
    (lambda d: d["tenants"][0].update(limits={"requests_per_minute": "ten"}),
     "requests_per_minute must be an integer, not 'ten'"),
    (lambda d: d["tenants"][0].update(api_key_env=7), "api_key_env must be a list or a string, not 7"),
    (lambda d: d["tenants"][0].update(limits={"rpm": 1}), "unknown limit"),
    (lambda d: d["tenants"][0].update(limits={"requests_per_minute": 0}),
     r"tenants\[0\].limits.requests_per_minute must be >= 1: 0 would turn every request away"),
    (lambda d: d["tenants"][0].update(limits={"tokens_per_minute": 0}), "tokens_per_minute must be >= 1"),
    (lambda d: d["tenants"][0].update(limits={"max_concurrent": 0}), "max_concurrent must be >= 1"),
    (lambda d: d["models"][0].update(kind="cloud"), "kind"),
    (lambda d: d["models"].append(dict(d["models"][0])), "duplicate model"),
    (lambda d: d["tenants"].append({"name": "u", "api_key_sha256": [key_digest("k")]}),
     "the same API key is given to tenants 't' and 'u'"),
    (lambda d: d["tenants"].append({"name": "u", "api_key_sha256": [key_digest("k").upper()]}),
     "the same API key is given to tenants 't' and 'u'"),
    (lambda d: d["tenants"][0].update(api_key_env=["STEPAHEAD_UNSET_VAR"]), "not set"),
    (lambda d: d["tenants"].extend([{"name": "u", "api_key_sha256": [key_digest("u")], "kv_share": 0.6},
                                    {"name": "v", "api_key_sha256": [key_digest("v")], "kv_share": 0.6}]),
     "kv_share"),
    (lambda d: d.setdefault("server", {}).update(keep_alive_s=0), "keep_alive_s must be > 0"),
    (lambda d: d.setdefault("server", {}).update(keep_alive_s="long"), "keep_alive_s"),
    (lambda d: d.setdefault("server", {}).update(shutdown_timeout_s=-1), "shutdown_timeout_s must be >= 0"),
    (lambda d: d.setdefault("server", {}).update(shutdown_timeout_s="soon"), "shutdown_timeout_s"),
    (lambda d: d.setdefault("server", {}).update(respones_db="x"),
     r"server: unknown key 'respones_db'; did you mean 'responses_db'\?"),
    (lambda d: d["models"].__setitem__(0, {"name": "m", "path": "tiny", "num_worker": 4}),
     r"models\[0\]: unknown key 'num_worker'; did you mean 'num_workers'\?"),
    (lambda d: d["tenants"][0].update(kv_shares=0.2),
     r"tenants\[0\]: unknown key 'kv_shares'; did you mean 'kv_share'\?"),
    (lambda d: d["tenants"][0].update(service_tier="priority"),
     r"tenants\[0\].service_tier must be one of default, flex, not 'priority'"),
    (lambda d: d.update(tracin={}), r"unknown table 'tracin'; did you mean 'tracing'\?"),
    (lambda d: d["models"][0].update(kind="upstream", litellm_model="openai/x", path=None),
     r"models\[0\]: unknown key 'path' \(known: api_base, "),
    (lambda d: d["models"].__setitem__(0, {"name": "e", "kind": "embedding", "path": "/m", "pool": "cls"}),
     r"unknown key 'pool'"),
    (lambda d: d.setdefault("server", {}).update(responses_per_tenant=0), "responses_per_tenant must be > 0"),
    (lambda d: d.setdefault("server", {}).update(max_body_bytes=-1), "max_body_bytes must be > 0"),
    (lambda d: d.setdefault("server", {}).update(queue_timeout_s=0), "queue_timeout_s must be > 0"),
    (lambda d: d.setdefault("server", {}).update(port=70000), r"port must be in \[0, 65535\]"),
    (lambda d: d.update(server=True), "server must be a table, not True"),
    (lambda d: d.update(tracing=[1]), r"tracing must be a table, not \[1\]"),
    (lambda d: d.update(models=1.5), r"models must be an array of tables \(\[\[models\]\]\), not 1.5"),
    (lambda d: d["models"].append(True), r"models\[1\] must be a table, not True"),
    (lambda d: d["tenants"][0].update(limits=3), r"tenants\[0\].limits must be a table, not 3"),
    (lambda d: d["tenants"][0].update(api_key_env=[True]), "api_key_env must be a string or a list of strings"),
    (lambda d: d["tenants"][0].update(weight=float("nan")), "weight must be a finite number"),
    (lambda d: d["models"][0].update(timeout_s=-5), r"models\[0\].timeout_s must be > 0"),
    (lambda d: d["models"][0].update(max_context_tokens=0), r"models\[0\].max_context_tokens must be > 0"),
    (lambda d: d["models"][0].update(timeout_s=float("nan")), r"models\[0\].timeout_s must be a finite number"),
    # tomllib loads integers past TOML's 64 bits (QA145: the rate headers then said 10^20)
    (lambda d: d["tenants"][0].update(limits={"requests_per_minute": 10**20}),
     r"tenants\[0\].limits.requests_per_minute is past TOML's 64-bit integer range: 100000000000000000000"),
    (lambda d: d["models"][0].update(timeout_s=-2**63 - 1), r"models\[0\].timeout_s is past TOML's 64-bit"),
    (lambda d: d["models"][0].update(litellm_params={"extra_body": {"seed": 2**64}}),
     r"models\[0\].litellm_params.extra_body.seed is past TOML's 64-bit"),   # QA157: sent upstream as given
    (lambda d: d["models"].append({"name": "loc", "engine": {"num_hot_blocks": 2**64}}),
     r"models\[1\].engine.num_hot_blocks is past TOML's 64-bit integer range"),   # QA151: a table read whole
    (lambda d: d["models"].append({"name": "loc", "engine": {"tenant_weights": {"a": [1, -2**70]}}}),
     r"models\[1\].engine.tenant_weights.a\[1\] is past TOML's 64-bit"),
    # the name the metrics give requests whose key failed: a tenant so named would mix them in
    (lambda d: d["tenants"][0].update(name="unauthenticated"), r"tenants\[0\].name 'unauthenticated' is reserved"),
    # QA211 F2: the digest of the empty key (an unset variable hashed) names a tenant no request can be
    (lambda d: d["tenants"][0].update(api_key_sha256=[key_digest("k"), hashlib.sha256(b"").hexdigest()]),
     r"^tenants\[0\].api_key_sha256: an entry is the digest of the empty key: no request can present it "
     r"\(hashed an unset variable\?\)$"),
    (lambda d: d["tenants"][0].update(api_key_sha256=hashlib.sha256(b"").hexdigest().upper()),
     r"^tenants\[0\].api_key_sha256: an entry is the digest of the empty key: "),
    (lambda d: d["tenants"][0].update(api_key_sha256=hashlib.sha256(b"\n").hexdigest()),
     r"^tenants\[0\].api_key_sha256: an entry is the digest of a lone newline \(the empty key, once stripped\): "
     r"no request can present it"),
    (lambda d: d["tenants"][0].update(api_key_sha256=hashlib.sha256(b"\r\n").hexdigest()),   # QA217 F3
     r"^tenants\[0\].api_key_sha256: an entry is the digest of only whitespace \('\\r\\n': the empty key, once "
     r"stripped\): no request can present it"),
    # QA211 F3: a negative rate or slot count said ">= 0", and 0 is refused too
    (lambda d: d["tenants"][0].update(limits={"requests_per_minute": -1}),
     r"^tenants\[0\].limits.requests_per_minute must be >= 1: 0 would turn every request away"),
    (lambda d: d["tenants"][0].update(limits={"tokens_per_minute": -5}),
     r"^tenants\[0\].limits.tokens_per_minute must be >= 1: 0 would turn every request away"),
    (lambda d: d["tenants"][0].update(limits={"max_concurrent": -2**63}),
     r"^tenants\[0\].limits.max_concurrent must be >= 1: 0 would turn every request away"),
    (lambda d: d["tenants"][0].update(limits={"max_queued": -1}), r"^tenants\[0\].limits.max_queued must be >= 0$"),
    (lambda d: d["tenants"][0].update(limits={"token_budget": -1}),
     r"^tenants\[0\].limits.token_budget must be >= 0$"),
])
def test_parse_config_rejects_bad_input(change, needle):
    data = _base()
    change(data)
    with pytest.raises(ConfigError, match=needle):
        parse_config(data)


def test_one_key_digest_or_variable_may_be_a_string(monkeypatch):
    monkeypatch.setenv("STEPAHEAD_TEST_ONE_KEY", "sk-one")
    data = _base(api_key_sha256=key_digest("k"), api_key_env="STEPAHEAD_TEST_ONE_KEY")
    (tenant,) = parse_config(data).tenants
    assert tenant.key_digests == (key_digest("k"), key_digest("sk-one"))


def test_a_key_from_a_variable_is_the_key_without_surrounding_whitespace(monkeypatch):
    from gateway.auth import KeyRing

    monkeypatch.setenv("STEPAHEAD_TEST_SPACED_KEY", "sk-env-key-123 \n")
    (tenant,) = parse_config(_base(api_key_env="STEPAHEAD_TEST_SPACED_KEY")).tenants
    assert tenant.key_digests == (key_digest("k"), key_digest("sk-env-key-123"))
    assert KeyRing((tenant,)).authenticate("Bearer sk-env-key-123") == tenant.name
    monkeypatch.setenv("STEPAHEAD_TEST_SPACED_KEY", " \t")
    with pytest.raises(ConfigError, match="STEPAHEAD_TEST_SPACED_KEY holds only whitespace$"):
        parse_config(_base(api_key_env="STEPAHEAD_TEST_SPACED_KEY"))
    monkeypatch.setenv("STEPAHEAD_TEST_SPACED_KEY", "")   # QA145: said "is not set" alone, as for no variable
    with pytest.raises(ConfigError, match="STEPAHEAD_TEST_SPACED_KEY is empty$"):
        parse_config(_base(api_key_env="STEPAHEAD_TEST_SPACED_KEY"))
    monkeypatch.delenv("STEPAHEAD_TEST_SPACED_KEY")
    with pytest.raises(ConfigError, match="STEPAHEAD_TEST_SPACED_KEY is not set$"):
        parse_config(_base(api_key_env="STEPAHEAD_TEST_SPACED_KEY"))


def test_the_demo_key_from_the_environment_is_stripped_and_a_blank_one_is_made_up():
    assert demo_key_from({"STEPAHEAD_DEMO_KEY": " sk-demo-x\n"}) == "sk-demo-x"
    made_up = {demo_key_from({"STEPAHEAD_DEMO_KEY": "  "}), demo_key_from({})}
    assert len(made_up) == 2 and all(key.startswith("sk-demo-") and len(key) > 20 for key in made_up)


def test_load_config_reports_toml_syntax(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("[[models]\nname=")
    with pytest.raises(ConfigError):
        load_config(path)
    path.write_bytes(b"\xff\xfe[server]\n")
    with pytest.raises(ConfigError, match="not UTF-8 text"):
        load_config(path)


def test_idle_connections_outlive_the_clients_keepalive_by_default():
    assert parse_config(_base()).keep_alive_s == 75.0  # httpx keeps idle ones 5 s, aiohttp 15 s
    data = _base()
    data["server"] = {"keep_alive_s": 20}
    assert parse_config(data).keep_alive_s == 20.0


def test_a_shutdown_waits_for_every_request_in_flight_unless_a_timeout_is_set():
    assert parse_config(_base()).shutdown_timeout_s is None
    data = _base()
    data["server"] = {"shutdown_timeout_s": 25}
    assert parse_config(data).shutdown_timeout_s == 25.0


def test_stored_responses_go_to_the_configured_file_the_variable_or_the_data_dir(tmp_path):
    data = _base()
    data["server"] = {"responses_db": str(tmp_path / "r.sqlite3")}
    assert parse_config(data).resolved_responses_db({}) == tmp_path / "r.sqlite3"
    default = parse_config(_base())
    assert default.resolved_responses_db({"STEPAHEAD_RESPONSES_DB": "/x/y.db"}) == Path("/x/y.db")
    assert default.resolved_responses_db({}).name == "responses.sqlite3"
    data["server"] = {"responses_db": ":memory:"}
    assert parse_config(data).resolved_responses_db({}) is None


def test_conversations_live_beside_the_responses_and_are_bounded_per_tenant(tmp_path):
    data = _base()
    data["server"] = {"responses_db": str(tmp_path / "r.sqlite3"), "conversations_per_tenant": 7}
    config = parse_config(data)
    assert config.resolved_conversations_db({}) == tmp_path / "conversations.sqlite3"
    assert config.conversations_per_tenant == 7
    assert parse_config(_base()).resolved_conversations_db({"STEPAHEAD_RESPONSES_DB": "/x/y.db"}) == \
        Path("/x/conversations.sqlite3")
    data["server"] = {"responses_db": ":memory:"}
    assert parse_config(data).resolved_conversations_db({}) is None
    data["server"] = {"conversations_per_tenant": 0}
    with pytest.raises(ConfigError, match="conversations_per_tenant"):
        parse_config(data)


def test_files_and_batches_live_beside_the_responses_with_their_limits(tmp_path):
    data = _base()
    data["server"] = {"responses_db": str(tmp_path / "r.sqlite3"), "max_file_bytes": 1000, "batch_concurrency": 3}
    config = parse_config(data)
    assert config.resolved_files_dir({}) == tmp_path / "files"
    assert (config.max_file_bytes, config.batch_concurrency) == (1000, 3)
    assert parse_config(_base()).batch_concurrency == 2
    data["server"] = {"responses_db": ":memory:"}
    assert parse_config(data).resolved_files_dir({}) is None
    for key in ("max_file_bytes", "batch_concurrency"):
        data["server"] = {key: 0}
        with pytest.raises(ConfigError, match=key):
            parse_config(data)
