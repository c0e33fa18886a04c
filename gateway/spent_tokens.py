"""The tokens each budgeted tenant has spent, kept across restarts.

A `token_budget` caps what a tenant may use over the gateway's life; counted in memory
only, a restart (a crash, a deploy, a config change that needs one) would give every
tenant its whole budget again. So the spent tokens of each tenant with a budget are
written to a small JSON file (`$STEPAHEAD_SPENT_TOKENS`, else `spent_tokens.json` in the
user data dir) every `SAVE_EVERY_S` seconds when they changed, and at shutdown, and read
back at the start.

Invariants: the file is written whole or not at all (cache/atomic_file.py), private to
this user when made here, as are the directories made for it (cache/private_paths.py); a
gateway only ever raises a tenant's entry or keeps it, never drops it (one removed from the
config, or whose budget was lifted, keeps its count for when it comes back); a file that
cannot be read is renamed aside (`<name>.damaged-<UTC time>`, with a warning): at the
start the counts then start at zero, later this process's counts are written anew. At
most the last `SAVE_EVERY_S` seconds of spending are lost to a crash.

Gateways that share the file share the budgets: each save (`SpentTokens.sync`, under an
exclusive lock on `<name>.lock` beside it) adds what this process spent since its last
save to the counts on file, not its own total over them, and hands back what the others
added meanwhile, which this process then counts as spent too: one gateway's spending
reaches another within two saves, so together they may overshoot a budget by what they
spend in that time. So does an edit: lowering or deleting a tenant's entry, running or
stopped, gives it that many tokens back at the next save (the file deleted: every
tenant's).
"""
from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path

from agents_trace.config import data_file
from cache.atomic_file import replacing
from cache.damaged_files import set_aside
from cache.private_paths import make_private_dirs, private_opener
from gateway.checkpoints import Checkpoints

FORMAT = "stepahead-spent-tokens/1"
PATH_ENV = "STEPAHEAD_SPENT_TOKENS"
FILE_NAME = "spent_tokens.json"
SAVE_EVERY_S = 10.0


def spent_tokens_path(environ: Mapping[str, str] = os.environ) -> Path:
    return data_file(environ.get(PATH_ENV), FILE_NAME)


class SpentTokens:
    """The counts on file as this process last read or wrote them (`counts`): what it
    spent since is its own tenants' counts less these."""

    def __init__(self, path: Path, counts: dict[str, int] | None = None) -> None:
        self.path = path
        self.counts: dict[str, int] = dict(counts or {})

    @classmethod
    def load(cls, path: Path) -> "SpentTokens":
        """The counts in `path` (none when it does not exist yet); a file that cannot be
        read is set aside and the counts start at zero."""
        return cls(path, _read(path) or {})

    def sync(self, spent_by_tenant: Mapping[str, int], budgeted: frozenset[str] | set[str]) -> dict[str, int]:
        """Add what each `budgeted` tenant spent since the last sync (its count in
        `spent_by_tenant` less `counts`) to the file's counts and write them when that
        changes them; return, per tenant, what the file's count moved by since the last
        sync other than by this process (other gateways' spending, an edit)."""
        if not budgeted and not self.counts and not self.path.exists():
            return {}   # no budgets, never any: no file, no lock file
        with _locked(self.path):
            on_file = _read(self.path)
            if on_file is None:   # set aside: nothing to learn from it, the counts written anew
                on_file = dict(self.counts)
            merged = dict(on_file)
            for tenant in budgeted:
                own = int(spent_by_tenant.get(tenant, 0)) - self.counts.get(tenant, 0)
                if own:
                    merged[tenant] = max(0, on_file.get(tenant, 0) + own)
            others = {tenant: on_file.get(tenant, 0) - self.counts.get(tenant, 0)
                      for tenant in on_file.keys() | self.counts.keys()
                      if on_file.get(tenant, 0) != self.counts.get(tenant, 0)}
            if merged != on_file or (merged and not self.path.exists()):   # (set aside: not there)
                make_private_dirs(self.path.parent)
                with replacing(self.path) as out:
                    json.dump({"format": FORMAT, "tenants": dict(sorted(merged.items()))}, out, indent=1)
                    out.write("\n")
            self.counts = merged
        return others


def _read(path: Path) -> dict[str, int] | None:
    """The counts in `path`: none when it does not exist; None for a file that cannot be
    read, which is set aside."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"not a {FORMAT} file")
        counts = data["tenants"]
        if not isinstance(counts, dict) or not all(
                isinstance(k, str) and type(v) is int and v >= 0 for k, v in counts.items()):
            raise ValueError("its 'tenants' is not a table of token counts")
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, KeyError) as exc:   # json's errors are ValueErrors
        set_aside(path, "the tenants' spent tokens", f"could not be read ({type(exc).__name__}: {exc})")
        return None
    return counts


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Exclusive use of `path` among the processes that lock it so (the file itself is
    replaced whole at each write, so the lock is on a file beside it that stays)."""
    make_private_dirs(path.parent)
    with open(path.with_name(path.name + ".lock"), "a", opener=private_opener) as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def start_spent_tokens(limiters, loop: asyncio.AbstractEventLoop) -> Checkpoints:
    """Resume the tenants' spent tokens into `limiters` (gateway/limiters.py) and save the
    budgeted ones every `SAVE_EVERY_S` s from now on; `stop()` the result for the last
    save. What the others added to the file is counted into `limiters` on `loop`'s
    thread; until it is, the saves count it as this process's (so none is lost or
    counted twice). The counts on file go with it, whenever a save changed them, so a
    budget a reload sets starts from the file as it stands (gateway/limiters.py)."""
    spent = SpentTokens.load(spent_tokens_path())
    limiters.restore_spent(spent.counts)
    lock = threading.Lock()
    not_counted_yet: dict[str, int] = {}
    on_file = spent.counts   # as `not_counted_yet` has them: both changed under `lock`

    def count_in() -> None:
        with lock:
            limiters.add_spent(not_counted_yet, on_file)
            not_counted_yet.clear()

    def save() -> None:
        nonlocal on_file
        budgeted = limiters.budgeted_tenants()   # before the counts: a budget set meanwhile waits a save
        with lock:
            counted = {tenant: n + not_counted_yet.get(tenant, 0) for tenant, n in limiters.saved_counts().items()}
        others = spent.sync(counted, budgeted)
        with lock:
            for tenant, num_tokens in others.items():
                not_counted_yet[tenant] = not_counted_yet.get(tenant, 0) + num_tokens
            is_changed, on_file = spent.counts != on_file, spent.counts   # replaced whole by each sync
        if (others or is_changed) and not loop.is_closed():
            loop.call_soon_threadsafe(count_in)

    return Checkpoints(save, SAVE_EVERY_S, name="stepahead-spent-tokens", what="the tenants' spent tokens").start()
