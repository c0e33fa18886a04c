"""API key → tenant.

Invariants: the key ring holds only sha256 digests, each of one tenant; a presented key is
hashed and its digest looked up (one dict lookup whatever the number of tenants: this
runs on every request). What the lookup's timing could tell about stored digests is
worthless to a caller: a digest is the SHA-256 of a key, so nearing one by trial says
nothing of the key behind it. The key never reaches a log line or an error message.
"""
from __future__ import annotations

import hashlib

from gateway.config import TenantConfig
from gateway.errors import unauthorized


class KeyRing:
    """Maps API keys (by digest) to tenant names."""

    __slots__ = ("_tenant_by_digest",)

    def __init__(self, tenants: tuple[TenantConfig, ...]) -> None:
        self._tenant_by_digest: dict[bytes, str] = {}
        for tenant in tenants:
            for digest in tenant.key_digests:
                owner = self._tenant_by_digest.setdefault(bytes.fromhex(digest), tenant.name)
                if owner != tenant.name:
                    raise ValueError(f"one API key is given to tenants {owner!r} and {tenant.name!r}")

    def tenant_for_key(self, api_key: str) -> str | None:
        return self._tenant_by_digest.get(hashlib.sha256(api_key.encode()).digest())

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
