"""File names for state kept per tenant (the predictor's models, the gap forecaster's
statistics): any tenant string maps to one filesystem-safe stem.

Invariant: the stem is `t-` + at most 40 characters of the name with everything but
`[A-Za-z0-9_.-]` replaced by `_` + `-` + 12 hex digits of the name's SHA-256, so two
tenants never share a file and a stem never starts with `_` or `.` (names the stores use
for their global and temporary files). The files carry the exact name; the stem is only
where to look.
"""
from __future__ import annotations

import hashlib
import re

TENANT_FILE_PREFIX = "t-"


def tenant_file_stem(tenant: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", tenant)[:40]
    return f"{TENANT_FILE_PREFIX}{safe}-{hashlib.sha256(tenant.encode()).hexdigest()[:12]}"
