"""A gap forecaster's statistics kept as a directory, one file per tenant.

Layout: `_global.json` holds the all-tenant level and `t-<slug>-<hash>.json`
(`cache.tenant_files`) each tenant's levels and known waits; every file is a
`cache.gap_memory` document (`FORMAT`) of its own, written atomically. A checkpoint
writes the tenants whose change mark (`GapForecaster.change_marks`) moved since they were
last written to this directory, or whose file is gone, and the small global file; with
thousands of idle tenants it is a file check each, not a rewrite of everything.

Invariants: a tenant's levels (keys starting with its name) live in its file only; a
crash between files leaves each file whole, some tenants as of this checkpoint and some as
of the one before (their statistics are independent; the global level is a prior); a
tenant's P(return) estimates are those of its last write (a recount moves them for idle
tenants too, and the first recount after a restart recomputes them all); `read` skips a
file it cannot read and says which, so one damaged file loses one tenant, not all.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from cache.gap_memory import LearnedGaps, read_gaps, write_gaps
from cache.tenant_files import TENANT_FILE_PREFIX, tenant_file_stem

GLOBAL_FILE = "_global.json"


def split_by_tenant(learned: LearnedGaps) -> tuple[LearnedGaps, dict[str, LearnedGaps]]:
    """`learned` as its all-tenant part and one part per tenant."""
    features = learned.return_features
    shared = LearnedGaps(features)
    parts = {tenant: LearnedGaps(features, steps={tenant: set(steps)}) for tenant, steps in learned.steps.items()}

    def part(key: tuple) -> LearnedGaps:
        if not key:
            return shared
        found = parts.get(key[0])
        if found is None:
            found = parts[key[0]] = LearnedGaps(features)
        return found

    for key, stats in learned.gaps.items():
        part(key).gaps[key] = stats
    for key, counts in learned.returns.items():
        part(key).returns[key] = counts
    for key, p in learned.p_estimates.items():
        part(key).p_estimates[key] = p
    return shared, parts


def merged(return_features: tuple[int, ...], parts: Iterable[LearnedGaps]) -> LearnedGaps:
    """One `LearnedGaps` of disjoint parts (ValueError if one was split by other features)."""
    whole = LearnedGaps(return_features)
    for part in parts:
        if tuple(part.return_features) != tuple(return_features):
            raise ValueError(f"split by return features {part.return_features}, not {return_features}")
        whole.gaps.update(part.gaps)
        whole.returns.update(part.returns)
        whole.p_estimates.update(part.p_estimates)
        whole.steps.update(part.steps)
    return whole


class GapFiles:
    """One directory of gap statistics, and what was last written to it from here."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self._written: dict[str, int] = {}   # tenant -> its change mark when last written here

    def stale(self, marks: Mapping[str, int]) -> list[str]:
        """The tenants a save must write: changed since written here, or their file gone."""
        return [tenant for tenant, mark in marks.items()
                if self._written.get(tenant) != mark or not self._path(tenant).exists()]

    def write(self, learned: LearnedGaps, marks: Mapping[str, int]) -> int:
        """Write the tenants in `learned` (with the `marks` they had when it was copied)
        and the global file; the number of tenant files written."""
        shared, parts = split_by_tenant(learned)
        for tenant, part in parts.items():
            write_gaps(part, self._path(tenant))
            if tenant in marks:
                self._written[tenant] = marks[tenant]
        write_gaps(shared, self.directory / GLOBAL_FILE)
        return len(parts)

    def mark_written(self, marks: Mapping[str, int]) -> None:
        """Note that the files here already hold these tenants as of `marks` (just read)."""
        self._written.update(marks)

    @property
    def global_path(self) -> Path:
        return self.directory / GLOBAL_FILE

    def exists(self) -> bool:
        return self.global_path.exists()

    def read(self) -> tuple[LearnedGaps, list[tuple[Path, str]]]:
        """Everything written here, and each tenant file skipped as unreadable with why.
        ValueError (or OSError) if the global file itself cannot be read."""
        shared = read_gaps(self.global_path)
        parts, problems = [shared], []
        for path in sorted(self.directory.glob(f"{TENANT_FILE_PREFIX}*.json")):
            try:
                part = read_gaps(path)
                if part.return_features != shared.return_features:
                    raise ValueError(f"split by return features {part.return_features}, "
                                     f"the global file by {shared.return_features}")
            except (ValueError, OSError) as exc:
                problems.append((path, str(exc)))
                continue
            parts.append(part)
        return merged(shared.return_features, parts), problems

    def _path(self, tenant: str) -> Path:
        return self.directory / f"{tenant_file_stem(tenant)}.json"
