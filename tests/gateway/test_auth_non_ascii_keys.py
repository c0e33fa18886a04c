"""Every key `stepahead hash-key` takes authenticates when its client sends it as UTF-8
(QA185 F4): the header is decoded before the whitespace around the key is stripped, so a
key whose last UTF-8 byte is 0x85 or 0xA0 ("à" = C3 A0, "Å" = C3 85) keeps it."""
import io

import pytest
from starlette.datastructures import Headers

from gateway.auth import KeyRing
from gateway.config import TenantConfig, key_digest
from gateway.errors import ApiError
from gateway.keys_command import read_key


def hash_key_digest(key: str) -> str:
    """The digest `printf %s KEY | stepahead hash-key` prints (its stdin read as UTF-8 bytes)."""
    stdin = io.TextIOWrapper(io.BytesIO(key.encode("utf-8")), encoding="utf-8")
    return key_digest(read_key(stdin))


def header_as_read(key: str, prefix: str = "Bearer ") -> str:
    """The Authorization header as the app reads it: the client's UTF-8 bytes, read as Latin-1."""
    return Headers(raw=[(b"authorization", prefix.encode() + key.encode("utf-8"))])["authorization"]


@pytest.mark.parametrize("key", ["sk-gammaà", "sk-gammaÅ", "sk-gammaĠ", "sk-gammaŅ", "sk-gammaé", "sk-àgamma",
                                 "sk-ÅàĠŅ", "sk-gamma\u0085x", "sk-gamma\u00a0x"])
def test_a_key_hash_key_accepts_authenticates_whatever_its_last_byte(key):
    ring = KeyRing((TenantConfig("gamma", (hash_key_digest(key),)),))
    assert ring.authenticate(header_as_read(key)) == "gamma"
    assert ring.authenticate(header_as_read(key, "bearer  ")) == "gamma"   # a double space, lowercase
    assert ring.authenticate(header_as_read(key + " ")) == "gamma"


def test_a_key_cut_short_of_its_last_character_is_another_key():
    ring = KeyRing((TenantConfig("gamma", (hash_key_digest("sk-gammaà"),)),))
    for wrong in ("sk-gamma", "sk-gammaá", "sk-gamma\u00a0"):
        with pytest.raises(ApiError) as caught:
            ring.authenticate(header_as_read(wrong))
        assert caught.value.status == 401


@pytest.mark.parametrize("key", ["sk-gamma\u00a0", "\u00a0sk-gamma", "sk-gamma\u0085", "sk-gamma\u3000"])
def test_unicode_whitespace_around_a_key_is_stripped_as_hash_key_strips_it(key):
    assert hash_key_digest(key) == key_digest("sk-gamma")
    ring = KeyRing((TenantConfig("gamma", (hash_key_digest(key),)),))
    assert ring.authenticate(header_as_read(key)) == "gamma"


@pytest.mark.parametrize("blank", ["\u00a0", "\u0085", " \u00a0 "])
def test_a_key_of_whitespace_alone_is_a_malformed_header(blank):
    ring = KeyRing((TenantConfig("gamma", (key_digest("sk-gamma"),)),))
    with pytest.raises(ApiError) as caught:
        ring.authenticate(header_as_read(blank))
    assert caught.value.status == 401 and caught.value.message.startswith("Malformed")


def test_an_internal_key_is_recognised_as_the_header_carries_it():
    ring = KeyRing((TenantConfig("gamma", (key_digest("sk-gamma"),)),))
    key = ring.new_internal_key("gamma")
    assert ring.is_internal(header_as_read(key + " ")) and ring.is_internal(header_as_read(key, "Bearer  "))
    assert not ring.is_internal(header_as_read("sk-gammaà"))
