"""API key → tenant.

Invariants: the key ring holds only sha256 digests, each of one tenant; a presented key is
hashed and its digest looked up (one dict lookup whatever the number of tenants: this
runs on every request). What the lookup's timing could tell about stored digests is
worthless to a caller: a digest is the SHA-256 of a key, so nearing one by trial says
nothing of the key behind it. A presented key is the header's bytes read as UTF-8, then
stripped of the whitespace around it, as `stepahead hash-key` reads its stdin (`_presented`):
the two agree on every key's digest. The key never reaches a log line or an error message.
Internal keys (`internal`, shared across reloads: the Batch API's requests, sent to the
app in this process) are random, never written anywhere, and name a tenant only while
that tenant is configured. A request with more than one Authorization header is refused
whatever they hold (`repeated_authorization`): which one counts would depend on who reads.
"""
from __future__ import annotations

import hashlib
import secrets

from gateway.config import TenantConfig
from gateway.errors import ApiError, unauthorized


def repeated_authorization(headers: list[tuple[bytes, bytes]]) -> ApiError | None:
    """A 401 for ASGI `headers` holding more than one Authorization header (a proxy that
    added or kept one may read the other: the request is ambiguous), else None."""
    num_found = 0
    for name, _ in headers:
        if name == b"authorization":
            num_found += 1
    if num_found < 2:
        return None
    return unauthorized(f"The request has {num_found} Authorization headers; send exactly one: "
                        "'Authorization: Bearer YOUR_KEY'.")


class KeyRing:
    """Maps API keys (by digest) to tenant names."""

    __slots__ = ("_tenant_by_digest", "_tenants", "internal")

    def __init__(self, tenants: tuple[TenantConfig, ...], internal: dict[bytes, str] | None = None) -> None:
        self._tenant_by_digest: dict[bytes, str] = {}
        self._tenants = frozenset(tenant.name for tenant in tenants)
        self.internal: dict[bytes, str] = {} if internal is None else internal
        for tenant in tenants:
            for digest in tenant.key_digests:
                owner = self._tenant_by_digest.setdefault(bytes.fromhex(digest), tenant.name)
                if owner != tenant.name:
                    raise ValueError(f"one API key is given to tenants {owner!r} and {tenant.name!r}")

    def tenant_for_key(self, api_key: str) -> str | None:
        digest = hashlib.sha256(api_key.encode()).digest()
        tenant = self._tenant_by_digest.get(digest)
        if tenant is None and self.internal:
            tenant = self.internal.get(digest)
            return tenant if tenant in self._tenants else None
        return tenant

    def has_tenant(self, tenant: str) -> bool:
        """Whether `tenant` is configured (its internal keys work)."""
        return tenant in self._tenants

    def new_internal_key(self, tenant: str) -> str:
        """A key for `tenant` that only this process knows, until `drop_internal_key`."""
        key = "sk-internal-" + secrets.token_urlsafe(32)
        self.internal[hashlib.sha256(key.encode()).digest()] = tenant
        return key

    def drop_internal_key(self, key: str) -> None:
        self.internal.pop(hashlib.sha256(key.encode()).digest(), None)

    def is_internal(self, authorization: str | None) -> bool:
        """Whether the header carries an internal key (the request comes from this process)."""
        scheme, _, api_key = (authorization or "").partition(" ")
        return bool(self.internal) and hashlib.sha256(_presented(api_key).encode()).digest() in self.internal

    def authenticate(self, authorization: str | None) -> str:
        """The tenant for an `Authorization: Bearer KEY` header, or a 401 `ApiError`."""
        if not authorization:
            raise unauthorized("Missing API key: send 'Authorization: Bearer YOUR_KEY'.")
        scheme, _, api_key = authorization.partition(" ")
        api_key = _presented(api_key)
        if scheme.lower() != "bearer" or not api_key:
            raise unauthorized("Malformed Authorization header: expected 'Bearer YOUR_KEY'.")
        tenant = self.tenant_for_key(api_key)
        if tenant is None:
            raise unauthorized()
        return tenant


def _presented(api_key: str) -> str:
    """The key after "Bearer " as its client wrote it (`_as_sent`), without the whitespace
    around it ("Bearer  KEY ", as `stepahead hash-key` strips its stdin's line). Decoded
    first, stripped after: read as Latin-1, the last byte of a UTF-8 character can be 0x85
    or 0xA0, which `str.strip` takes for whitespace (NEL, NBSP), so stripping first would
    cut a key ending in "à" or "Å" short of its digest."""
    return _as_sent(api_key).strip()


def _as_sent(api_key: str) -> str:
    """The key as its client wrote it: HTTP headers are read as Latin-1, so a key of
    non-ASCII characters, sent as UTF-8 bytes (as `stepahead hash-key` hashes it), is
    read back from those bytes; a header that is no UTF-8 stays as read."""
    try:
        return api_key.encode("latin-1").decode("utf-8")
    except UnicodeError:
        return api_key
