"""Which Ray cluster a `transport_options.address` names, and whether it answers.

"auto" is resolved here, not by Ray: Ray's own "auto" falls back, when neither
`RAY_ADDRESS` nor a cluster recorded by `ray start` exists, to the first `gcs_server`
process it finds on the machine, which may be the private instance another gateway
(any `ray.init()` without an address) started for itself. Joining it shares that
gateway's CPUs, and its ordinary stop then kills this gateway's actors.

Invariant: "auto" means `RAY_ADDRESS`, else the address `ray start` wrote to its
address file (`recorded_address_file`), else nothing: a start error, never a guess. A
private instance is never recorded there (only `ray start` writes the file), so it is
never joined by "auto".
"""
from __future__ import annotations

import os
import socket

CONNECT_CHECK_S = 3.0      # a cluster's GCS (or client server) answers a TCP connect in far less
RAY_CLIENT_PORT = 10001    # Ray's default for "ray://host"


def split_address(address: str) -> tuple[bool, str, int] | None:
    """(client, host, port) of "host:port" or "ray://host[:port]" (`client`: the latter,
    Ray's client mode); None when `address` is neither."""
    client = address.startswith("ray://")
    rest = address[len("ray://"):] if client else address
    host, colon, port = rest.rpartition(":")
    if not colon and client:
        host, port = rest, str(RAY_CLIENT_PORT)
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not host or any(c.isspace() or c in "/@?#" for c in host) or not port.isdigit() or not 0 < int(port) < 65536:
        return None
    return client, host, int(port)


def address_problem(address: object) -> str | None:
    """Why `address` cannot name a Ray cluster, or None: it must be "local" (a new local
    instance, also what no address means), "auto" (RAY_ADDRESS, else the cluster `ray
    start` recorded on this machine), "host:port" (the head's GCS) or "ray://host[:port]"."""
    if not isinstance(address, str):
        return f"must be a string, not {address!r}"
    if address in ("local", "auto") or split_address(address) is not None:
        return None
    return f'must be "local", "auto", "HOST:PORT" or "ray://HOST[:PORT]", not {address!r}'


def recorded_address_file() -> str:
    """Where `ray start` records the cluster it started or joined (Ray 2.60:
    `$RAY_TMPDIR`, else `$TMPDIR`, else /tmp, then `ray/ray_current_cluster`; `ray stop`
    removes it)."""
    try:
        from ray._common.utils import get_ray_address_file
    except ImportError:   # another Ray version: the same rule, written out
        base = os.environ.get("RAY_TMPDIR") or os.environ.get("TMPDIR") or "/tmp"
        return os.path.join(base, "ray", "ray_current_cluster")
    return get_ray_address_file(None)


def resolve_auto() -> str:
    """The address "auto" stands for: RAY_ADDRESS, else the recorded cluster's. Raises
    ConnectionError (one line) when there is neither."""
    from_env = os.environ.get("RAY_ADDRESS", "").strip()
    if from_env:
        return from_env
    path = recorded_address_file()
    try:
        with open(path, encoding="utf-8") as f:
            recorded = f.read().strip()
    except OSError:
        recorded = ""
    if recorded:
        return recorded
    raise ConnectionError(f'address "auto" names no Ray cluster: RAY_ADDRESS is not set and `ray start` recorded '
                          f'none in {path} (a Ray instance another process started for itself is never joined); '
                          f'start one with `ray start --head`, or give its address')


def check_reachable(address: str) -> str:
    """The address to join (`address`, or what "auto" stands for, `resolve_auto`); raise
    ConnectionError, within CONNECT_CHECK_S, when nothing answers a TCP connect there:
    `ray.init` would retry an absent GCS for minutes, and cannot be interrupted. "local"
    needs no check."""
    given = address
    if address == "local":
        return address
    if address == "auto":
        address = resolve_auto()
    parts = split_address(address)
    if parts is None:   # e.g. RAY_ADDRESS malformed: Ray's own error says so
        return address
    _, host, port = parts
    try:
        socket.create_connection((host, port), timeout=CONNECT_CHECK_S).close()
    except OSError as exc:
        where = f"{host}:{port}" + ("" if given.endswith(f"{host}:{port}") else f" (address {given!r})")
        raise ConnectionError(f"no Ray cluster answers at {where}: "
                              f"{exc.strerror or exc or type(exc).__name__}") from exc
    return address
