import pytest

from gateway.auth import KeyRing
from gateway.config import TenantConfig, key_digest
from gateway.errors import ApiError

RING = KeyRing((TenantConfig("a", (key_digest("ka"), key_digest("ka2"))),
                TenantConfig("b", (key_digest("kb"),))))


def test_keyring_maps_every_key_to_its_tenant():
    assert RING.authenticate("Bearer ka") == "a"
    assert RING.authenticate("bearer ka2") == "a"
    assert RING.authenticate("Bearer kb") == "b"


@pytest.mark.parametrize("header", [None, "", "Bearer", "Basic ka", "Bearer nope", "Bearer  "])
def test_keyring_rejects_missing_malformed_and_unknown(header):
    with pytest.raises(ApiError) as caught:
        RING.authenticate(header)
    assert caught.value.status == 401
    assert "ka" not in caught.value.message.split()


def test_keyring_stores_only_digests():
    assert all(len(digest) == 32 for digest in RING._tenant_by_digest)


def test_a_key_listed_twice_for_one_tenant_is_one_key_and_a_key_of_two_tenants_is_refused():
    ring = KeyRing((TenantConfig("a", (key_digest("ka"), key_digest("ka").upper())),))
    assert ring.tenant_for_key("ka") == "a" and ring.tenant_for_key("kb") is None
    with pytest.raises(ValueError, match="tenants 'a' and 'b'"):
        KeyRing((TenantConfig("a", (key_digest("ka"),)), TenantConfig("b", (key_digest("ka"),))))


def test_a_config_may_list_a_key_twice_for_one_tenant():
    from gateway.config import GatewayConfig, UpstreamModelConfig

    config = GatewayConfig(models=(UpstreamModelConfig(name="m", litellm_model="openai/x"),),
                           tenants=(TenantConfig("a", (key_digest("ka"), key_digest("ka"))),))
    assert KeyRing(config.tenants).authenticate("Bearer ka") == "a"


def test_an_internal_key_names_its_tenant_while_it_is_configured_and_outlives_a_reload():
    ring = KeyRing((TenantConfig("a", (key_digest("ka"),)),))
    key = ring.new_internal_key("a")
    assert ring.authenticate(f"Bearer {key}") == "a" and ring.is_internal(f"Bearer {key}")
    assert not ring.is_internal("Bearer ka")
    reloaded = KeyRing((TenantConfig("a", (key_digest("kb"),)),), ring.internal)
    assert reloaded.authenticate(f"Bearer {key}") == "a"
    without_a = KeyRing((TenantConfig("b", (key_digest("kb"),)),), ring.internal)
    with pytest.raises(ApiError):
        without_a.authenticate(f"Bearer {key}")   # a removed tenant's batch stops being served
    ring.drop_internal_key(key)
    with pytest.raises(ApiError):
        reloaded.authenticate(f"Bearer {key}")


def test_a_non_ascii_key_sent_as_utf8_bytes_matches_the_digest_hash_key_made():
    """F10's suspicion, confirmed: Starlette reads a header as Latin-1, so a UTF-8 key
    such as "clé-é" arrived as "clÃ©-Ã©" and never matched `key_digest("clé-é")`."""
    ring = KeyRing((TenantConfig("u", (key_digest("clé-é"),)),))
    as_read = "Bearer clé-é".encode("utf-8").decode("latin-1")   # what the app's header holds
    assert ring.authenticate(as_read) == "u"
    assert ring.authenticate("Bearer clé-é") == "u"   # a caller holding the key itself
    with pytest.raises(ApiError):
        ring.authenticate("Bearer cl\xe9".encode("utf-8").decode("latin-1"))
