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
    assert all(len(digest) == 32 for digest, _ in RING._entries)
