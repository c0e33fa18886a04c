"""API key → tenant on every request, with many tenants: comparing the presented key's
digest with every stored digest (what `gateway.auth.KeyRing` did before, reproduced here
as the baseline) against one dict lookup by digest (`KeyRing` now).

    python benchmarks/bench_auth.py [--tenants 10,1000,10000] [--lookups 2000]

For each tenant count (one key each): the median over 5 rounds of microseconds per
lookup, half of them known keys and half unknown, each way. Prints one JSON line.
"""
from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import os
import secrets
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gateway.auth import KeyRing  # noqa: E402
from gateway.config import TenantConfig, key_digest  # noqa: E402


def compare_every_digest(entries: tuple[tuple[bytes, str], ...], api_key: str) -> str | None:
    """The former lookup: constant time in which digest matched, linear in the tenants."""
    presented = hashlib.sha256(api_key.encode()).digest()
    found = None
    for digest, tenant in entries:
        if hmac.compare_digest(presented, digest):
            found = tenant
    return found


def per_lookup_us(lookup, keys: list[str]) -> float:
    began = time.perf_counter()
    for key in keys:
        lookup(key)
    return (time.perf_counter() - began) / len(keys) * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tenants", default="10,1000,10000")
    parser.add_argument("--lookups", type=int, default=2000)
    args = parser.parse_args()
    results = []
    for num_tenants in (int(n) for n in args.tenants.split(",")):
        keys = [secrets.token_urlsafe(24) for _ in range(num_tenants)]
        tenants = tuple(TenantConfig(f"tenant-{i}", (key_digest(k),)) for i, k in enumerate(keys))
        ring = KeyRing(tenants)
        entries = tuple((bytes.fromhex(d), t.name) for t in tenants for d in t.key_digests)
        presented = [keys[i % num_tenants] if i % 2 == 0 else secrets.token_urlsafe(24) for i in range(args.lookups)]
        assert [ring.tenant_for_key(k) for k in presented] == [compare_every_digest(entries, k) for k in presented]
        every, one = [], []
        for _ in range(5):
            every.append(per_lookup_us(lambda k: compare_every_digest(entries, k), presented))
            one.append(per_lookup_us(ring.tenant_for_key, presented))
        every_us, one_us = statistics.median(every), statistics.median(one)
        results.append({"tenants": num_tenants, "every_digest_us": round(every_us, 2), "dict_lookup_us": round(one_us, 2),
                        "ratio": round(every_us / one_us, 1)})
    print(json.dumps({"benchmark": "auth", "lookups": args.lookups, "cpus": os.cpu_count(), "results": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
