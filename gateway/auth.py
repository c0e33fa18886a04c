"""API key → tenant.

Invariants: the key ring holds only sha256 digests; a presented key is hashed and compared
with every stored digest by `hmac.compare_digest`, with no early exit, so the time taken
does not depend on which (or whether a) digest matched. The key never reaches a log line
or an error message.
"""
from __future__ import annotations

import hashlib
import hmac

from gateway.config import TenantConfig
from gateway.errors import unauthorized


class KeyRing:
    """Maps API keys (by digest) to tenant names."""

    __slots__ = ("_entries",)

    def __init__(self, tenants: tuple[TenantConfig, ...]) -> None:
        self._entries: tuple[tuple[bytes, str], ...] = tuple(
            (bytes.fromhex(digest), tenant.name)
            for tenant in tenants for digest in tenant.key_digests)

    def tenant_for_key(self, api_key: str) -> str | None:
        presented = hashlib.sha256(api_key.encode()).digest()
        found: str | None = None
        for digest, tenant in self._entries:
            if hmac.compare_digest(presented, digest):
                found = tenant
        return found

    def authenticate(self, authorization: str | None) -> str:
        """The tenant for an `Authorization: Bearer KEY` header, or a 401 `ApiError`."""
        if not authorization:
            raise unauthorized("Missing API key: send 'Authorization: Bearer YOUR_KEY'.")
        scheme, _, api_key = authorization.partition(" ")
        if scheme.lower() != "bearer" or not api_key.strip():
            raise unauthorized("Malformed Authorization header: expected 'Bearer YOUR_KEY'.")
        tenant = self.tenant_for_key(api_key.strip())
        if tenant is None:
            raise unauthorized()
        return tenant
