"""The tokens each budgeted tenant has spent, kept across restarts.

A `token_budget` caps what a tenant may use over the gateway's life; counted in memory
only, a restart (a crash, a deploy, a config change that needs one) would give every
tenant its whole budget again. So the spent tokens of each tenant with a budget are
written to a small JSON file (`$STEPAHEAD_SPENT_TOKENS`, else `spent_tokens.json` in the
user data dir) every `SAVE_EVERY_S` seconds when they changed, and at shutdown, and read
back at the start.

Invariants: the file is written whole or not at all (cache/atomic_file.py); a tenant's
entry is only ever raised or kept, never dropped (one removed from the config, or whose
budget was lifted, keeps its count for when it comes back); a file that cannot be read
is renamed aside (`<name>.damaged-<UTC time>`, with a warning) and the counts start at
zero. To give a tenant its budget back, edit or delete its entry while the gateway is
stopped. At most the last `SAVE_EVERY_S` seconds of spending are lost to a crash.
"""
from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from agents_trace.config import data_file
from cache.atomic_file import replacing
from cache.damaged_files import set_aside
from gateway.checkpoints import Checkpoints

FORMAT = "stepahead-spent-tokens/1"
PATH_ENV = "STEPAHEAD_SPENT_TOKENS"
FILE_NAME = "spent_tokens.json"
SAVE_EVERY_S = 10.0


def spent_tokens_path(environ: Mapping[str, str] = os.environ) -> Path:
    return data_file(environ.get(PATH_ENV), FILE_NAME)


class SpentTokens:
    """The counts as last read or written; `save` writes the budgeted tenants' current
    counts over them when any changed."""

    def __init__(self, path: Path, counts: dict[str, int] | None = None) -> None:
        self.path = path
        self.counts: dict[str, int] = dict(counts or {})

    @classmethod
    def load(cls, path: Path) -> "SpentTokens":
        """The counts in `path` (none when it does not exist yet); a file that cannot be
        read is set aside and the counts start at zero."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(data, dict) or data.get("format") != FORMAT:
                raise ValueError(f"not a {FORMAT} file")
            counts = data["tenants"]
            if not isinstance(counts, dict) or not all(
                    isinstance(k, str) and type(v) is int and v >= 0 for k, v in counts.items()):
                raise ValueError("its 'tenants' is not a table of token counts")
        except FileNotFoundError:
            return cls(path)
        except (OSError, ValueError, KeyError) as exc:   # json's errors are ValueErrors
            set_aside(path, "the tenants' spent tokens", f"could not be read ({type(exc).__name__}: {exc})")
            return cls(path)
        return cls(path, counts)

    def save(self, spent_by_tenant: Mapping[str, int]) -> bool:
        """Write `spent_by_tenant` (the budgeted tenants' counts now) over the kept ones,
        if any changed; whether the file was written."""
        merged = {**self.counts, **{tenant: int(n) for tenant, n in spent_by_tenant.items()}}
        if merged == self.counts and (self.path.exists() or not merged):   # no budgets: no file
            return False
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with replacing(self.path) as out:
            json.dump({"format": FORMAT, "tenants": dict(sorted(merged.items()))}, out, indent=1)
            out.write("\n")
        self.counts = merged
        return True


def start_spent_tokens(limiters) -> Checkpoints:
    """Resume the budgeted tenants' spent tokens into `limiters` (gateway/limits.py) and
    save them every `SAVE_EVERY_S` s from now on; `stop()` the result for the last save."""
    spent = SpentTokens.load(spent_tokens_path())
    limiters.restore_spent(spent.counts)
    return Checkpoints(lambda: spent.save(limiters.spent_by_budgeted_tenant()), SAVE_EVERY_S,
                       name="stepahead-spent-tokens", what="the tenants' spent tokens").start()
