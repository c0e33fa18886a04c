"""The replay's per-tenant API keys: reading `--tenant-keys-file`, and the warning for
keys given for tenants a trace does not have.

Invariants: no message this module makes ever holds a key (a bad line is named by its
number, a duplicate by its tenant); a file others than its owner may read is a warning,
never an error; a key for a tenant the trace lacks is a warning too, so one set of keys
can serve several traces.
"""
from __future__ import annotations

import os
import stat

from cache.trace_format import TraceRecord

MAX_TENANTS_NAMED = 10   # a warning names at most this many of the trace's tenants


def tenant_keys_file(path: str) -> tuple[dict[str, str], str | None]:
    """The keys of a --tenant-keys-file, by tenant, and a warning line when others than its
    owner may read it (None: they may not). Its lines are TENANT=KEY, whitespace around
    either stripped, a key split at its first '='; blank lines and lines starting with '#'
    are skipped. A ValueError's message names the file and a line, never a key."""
    try:
        with open(path, "rb") as file:
            mode = os.fstat(file.fileno()).st_mode
            data = file.read()
    except OSError as exc:
        raise ValueError(f"cannot read --tenant-keys-file {path}: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ValueError(f"--tenant-keys-file {path} line {line}: not UTF-8 text") from None
    keys: dict[str, str] = {}
    line_of: dict[str, int] = {}   # where each tenant's key is
    for number, line in enumerate(text.split("\n"), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        tenant, sep, key = (part.strip() for part in line.partition("="))
        if not sep or not tenant or not key:
            raise ValueError(f"--tenant-keys-file {path} line {number}: expected TENANT=KEY")
        if tenant in keys:
            raise ValueError(f"--tenant-keys-file {path} line {number}: a second key for tenant {tenant!r} "
                             f"(the first is on line {line_of[tenant]})")
        keys[tenant], line_of[tenant] = key, number
    warning = None
    if stat.S_ISREG(mode) and mode & 0o044:
        warning = (f"warning: --tenant-keys-file {path} is readable by others than its owner "
                   f"(mode {stat.S_IMODE(mode):04o}): chmod 600 {path}")
    return keys, warning


def unknown_tenants_warning(tenant_keys: dict[str, str], records: list[TraceRecord],
                            flag: str = "--tenant-key") -> str | None:
    """A warning line for `flag`'s tenants the trace does not have (None: all known)."""
    tenants = sorted({record.tenant for record in records})
    unknown = [tenant for tenant in tenant_keys if tenant not in tenants]
    if not unknown:
        return None
    return (f"warning: {flag} for {_named(unknown)}: the trace has no such tenant, "
            f"so the key goes unused (its tenants: {_named(tenants)})")


def _named(names: list[str]) -> str:
    """`names` quoted, at most MAX_TENANTS_NAMED of them, and how many more."""
    more = f" and {len(names) - MAX_TENANTS_NAMED} more" if len(names) > MAX_TENANTS_NAMED else ""
    return ", ".join(repr(name) for name in names[:MAX_TENANTS_NAMED]) + more
