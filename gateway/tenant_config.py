"""The `[[tenants]]` of the gateway's config: names, API keys (as digests), limits, shares.

Invariants: every record is frozen; API keys only ever exist here as sha256 hex digests
(a key read from an environment variable is hashed at load time and the plaintext
dropped), never the digest of a key no request can present (`UNPRESENTABLE_DIGESTS`: the
empty key's); a limit of None means "unlimited", never 0 or -1 (0 is only where it means
none: `max_queued`, `token_budget`; a rate or a slot count is >= 1); a tenant's name is
never empty, only whitespace, begun or ended by whitespace, or the reserved
`unauthenticated` in any letter case; names are case-sensitive (`beta` and `Beta` are two
tenants, which `config check` warns of: `case_twin_warnings`); no config error shows an
`api_key_sha256` or `api_key_env` value that looks like a key (`looks_like_key`: a key
pasted in place of its digest or its variable's name). gateway/config.py re-exports what is public here.
"""
from __future__ import annotations

import hashlib
import os
import secrets
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from gateway.config_values import KEY_IN_PLACE_OF_NAME, ConfigError, key_setting, reject_unknown_keys, take, \
    table_at

TENANT_KEYS = ("name", "api_key_sha256", "api_key_env", "weight", "kv_share", "admin", "limits", "service_tier",
               "models")
TENANT_TIERS = ("default", "flex")
UNAUTHENTICATED = "unauthenticated"   # the tenant a request's metrics name before its key is checked; no tenant may be named so


def tenant_name_problem(name: str) -> str | None:
    """Why `name` cannot name a tenant, to follow where it stands (`tenants[0].name ...`):
    empty or only whitespace, whitespace before or after it (QA211 F1: `beta ` was a second
    tenant that printed as `beta`), the reserved `unauthenticated` in any letter case, or
    not Unicode text (a command line's undecodable bytes); None when it can. The name is
    shown quoted (repr), so whitespace in it can be seen. `stepahead hash-key --tenant`
    asks this too."""
    if not name.strip():
        return "is required" if not name else f"{name!r} is only whitespace"
    if name != name.strip():
        return (f"{name!r} begins or ends with whitespace: remove it (names are compared exactly, so it would "
                f"be a tenant apart from {name.strip()!r})")
    if name.casefold() == UNAUTHENTICATED:
        return (f"{name!r} is reserved: the metrics name requests whose key is not checked yet (or failed) "
                "so" + ("" if name == UNAUTHENTICATED else f" ({UNAUTHENTICATED!r}, in any letter case)"))
    try:
        name.encode()
    except UnicodeEncodeError:
        return f"{name!r} is not Unicode text (bytes that are not UTF-8)"
    return None


def case_twin_warnings(names: Iterable[str]) -> list[str]:
    """One warning for each set of tenant names that differ only in letter case (`beta`,
    `Beta`), names quoted: they stay separate tenants (names are case-sensitive), but are
    almost surely one tenant spelt twice (QA211 F1). Empty when there are none."""
    groups: dict[str, list[str]] = {}
    for name in names:
        groups.setdefault(name.casefold(), []).append(name)
    warnings = []
    for group in groups.values():
        if len(set(group)) > 1:
            quoted = [repr(name) for name in dict.fromkeys(group)]
            warnings.append(f"tenants {', '.join(quoted[:-1])} and {quoted[-1]} differ only in letter case: they "
                            "are separate tenants (names are case-sensitive), each with its own keys, limits "
                            "and data")
    return warnings


def key_digest(api_key: str) -> str:
    """The only form in which the gateway keeps an API key. Whitespace around a key is no
    part of it (a client's header cannot carry it; `authenticate` strips it too), so a key
    given as " sk-x\n" is the key "sk-x"."""
    return hashlib.sha256(api_key.strip().encode()).hexdigest()


def demo_key_from(environ: Mapping[str, str]) -> str:
    """The demo tenant's key: $STEPAHEAD_DEMO_KEY without surrounding whitespace, else a fresh one."""
    return environ.get("STEPAHEAD_DEMO_KEY", "").strip() or f"sk-demo-{secrets.token_urlsafe(18)}"


@dataclass(frozen=True, slots=True)
class LimitsConfig:
    """Per-tenant limits. None = unlimited. `token_budget` is a total over the gateway's
    life, restarts included, counted from when it is set (a reload that gives a tenant one
    starts it from the spent-tokens file, as a start does: gateway/limiters.py;
    gateway/spent_tokens.py; a spent budget is a distinct, non-retryable error); `max_queued` requests may wait for a concurrency slot, the rest
    get 429 at once."""

    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    max_concurrent: int | None = None
    max_queued: int = 0
    token_budget: int | None = None


@dataclass(frozen=True, slots=True)
class TenantConfig:
    """`weight` is the tenant's share in fair scheduling; `kv_share` the fraction of hot KV
    blocks reserved for it (0 = none reserved); `admin` keys see every tenant's traces and
    metrics; `service_tier` "flex" serves every request of the tenant to a local model in
    the flex tier, whatever the request asks (an offline or evaluation tenant that must not
    slow the agents); `models` the names of the models its requests may use (None: every
    model the gateway serves; never empty), the others as unknown to it as a model not
    served (GatewayState.backend)."""

    name: str
    key_digests: tuple[str, ...]
    limits: LimitsConfig = LimitsConfig()
    weight: float = 1.0
    kv_share: float = 0.0
    admin: bool = False
    service_tier: str = "default"
    models: tuple[str, ...] | None = None



RATES_AND_SLOTS = ("requests_per_minute", "tokens_per_minute", "max_concurrent")   # limits with no 0
# digest -> the key it is the digest of, which no request can present (`authenticate` strips a key; "" is a 401)
UNPRESENTABLE_DIGESTS = MappingProxyType({
    hashlib.sha256(b"").hexdigest(): "the empty key",   # `echo -n "$UNSET" | sha256sum`
    hashlib.sha256(b"\n").hexdigest(): "a lone newline (the empty key, once stripped)",   # `echo "$UNSET" | ...`
    # whitespace alone, as a Windows line end or a blank variable leaves it (QA217 F3)
    **{hashlib.sha256(text.encode()).hexdigest(): f"only whitespace ({text!r}: the empty key, once stripped)"
       for text in ("\r\n", "\n\n", " ", "  ", "\t", " \n", "\t\n")}})


def _limits(table: dict, where: str) -> LimitsConfig:
    table = table_at(table, where)
    reject_unknown_keys(table, LimitsConfig.__slots__, where, "limit")
    values = {k: take(table, k, int, where) for k in table}
    for key, value in values.items():
        if value is not None and value < 1 and key in RATES_AND_SLOTS:   # QA211 F3: -1 said ">= 0"
            raise ConfigError(f"{where}.{key} must be >= 1: 0 would turn every request away (to stop a tenant's "
                              "traffic, remove the tenant or set its token_budget = 0)")
        if value is not None and value < 0:
            raise ConfigError(f"{where}.{key} must be >= 0")
    if values.get("max_queued") and values.get("max_concurrent") is None:
        raise ConfigError(f"{where}.max_queued needs max_concurrent: requests queue only for a concurrency slot")
    return LimitsConfig(**values)


def parse_tenant(table: dict, index: int) -> TenantConfig:
    where = f"tenants[{index}]"
    reject_unknown_keys(table, TENANT_KEYS, where)
    name = take(table, "name", str, where) or ""
    problem = tenant_name_problem(name)
    if problem:
        raise ConfigError(f"{where}.name {problem}")
    digests = key_setting(table, "api_key_sha256", where)
    for env_name in key_setting(table, "api_key_env", where):
        if not env_name.strip():   # QA203 F8: "environment variable  is not set" named nothing
            raise ConfigError(f"{where}.api_key_env: an entry is empty: {KEY_IN_PLACE_OF_NAME['api_key_env']}")
        if not os.environ.get(env_name, "").strip():
            value = os.environ.get(env_name)
            raise ConfigError(f"{where}: environment variable {env_name} " + (
                "is not set" if value is None else "is empty" if not value else "holds only whitespace"))
        digests.append(key_digest(os.environ[env_name]))
    for digest in digests:
        if not (isinstance(digest, str) and len(digest) == 64
                and all(c in "0123456789abcdef" for c in digest.lower())):
            raise ConfigError(f"{where}.api_key_sha256 entries must be sha256 hex digests")
        if digest.lower() in UNPRESENTABLE_DIGESTS:   # QA211 F2: a tenant that could never authenticate
            raise ConfigError(f"{where}.api_key_sha256: an entry is the digest of "
                              f"{UNPRESENTABLE_DIGESTS[digest.lower()]}: no request can present it "
                              "(hashed an unset variable?)")
    if not digests:
        raise ConfigError(f"{where} has no API key (api_key_sha256 or api_key_env)")
    weight = float(take(table, "weight", (int, float), where, 1.0))
    kv_share = float(take(table, "kv_share", (int, float), where, 0.0))
    if weight <= 0 or not 0.0 <= kv_share <= 1.0:
        raise ConfigError(f"{where}: weight must be > 0 and kv_share in [0, 1]")
    tier = take(table, "service_tier", str, where, "default")
    if tier not in TENANT_TIERS:
        raise ConfigError(f"{where}.service_tier must be one of {', '.join(TENANT_TIERS)}, not {tier!r}")
    return TenantConfig(name=name, key_digests=tuple(d.lower() for d in digests),
                        limits=_limits(table.get("limits", {}), f"{where}.limits"),
                        weight=weight, kv_share=kv_share,
                        admin=bool(take(table, "admin", bool, where, False)), service_tier=tier,
                        models=_models(table, where))


def _models(table: dict, where: str) -> tuple[str, ...] | None:
    """`tenants[i].models`: a list of model names, in order, each once; None when absent."""
    if "models" not in table:
        return None
    value = take(table, "models", list, where)
    if not value:
        raise ConfigError(f"{where}.models is empty: leave it out to let the tenant use every model (to stop "
                          "its traffic, remove the tenant or set its token_budget = 0)")
    if not all(isinstance(name, str) and name.strip() for name in value):
        raise ConfigError(f"{where}.models must be a list of model names, not {value!r}")
    return tuple(dict.fromkeys(value))


def unserved_tenant_model(tenants: Iterable[TenantConfig], served: Collection[str]) -> str | None:
    """Why a tenant's `models` name a model the config does not serve (a typo would leave
    the tenant without it, and every request naming it a 404), else None."""
    for index, tenant in enumerate(tenants):
        for name in tenant.models or ():
            if name not in served:
                return (f"tenants[{index}].models names {name!r}, which no [[models]] entry serves "
                        f"(served: {', '.join(map(repr, sorted(served)))})")
    return None
