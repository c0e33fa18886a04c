"""A gap forecaster's statistics kept as a directory, one file per tenant.

Layout: `_global.json` holds the all-tenant level and `t-<slug>-<hash>.json`
(`cache.tenant_files`) each tenant's levels and known waits; every file is a
`cache.gap_memory` document (`FORMAT`) of its own, written atomically, private to this
user when made here, as is the directory (`cache.private_paths`). A checkpoint
writes the tenants whose change mark (`GapForecaster.change_marks`) moved since they were
last written to this directory, or whose file is gone, and the small global file when
its content is not what was last written here or read from here (or the file is gone):
a save or restart after which nothing changed rewrites no file; with thousands of idle
tenants it is a file check each, not a rewrite of everything.

Invariants: a tenant's levels (keys starting with its name) live in its file only; a
crash between files leaves each file whole, some tenants as of this checkpoint and some as
of the one before (their statistics are independent; the global level is a prior); a
tenant's P(return) estimates are those of its last write (a recount moves them for idle
tenants too, and the first recount after a restart recomputes them all).

Damage: `read` leaves out, and names, each file it cannot use: unreadable (a number that
is not finite, a negative count: `cache.gap_memory.read_gaps`), split by other
return features than the forecaster's configuration, or holding other levels than its
name says (another tenant's, copied under this name: it must not replace that tenant).
Every file is checked against the configuration, not against another file, so one
damaged file loses what is in it only: a tenant, or, for the global file, the all-tenant
level (a prior, learned again). `set_aside` renames those files beside them; one it
cannot rename (a read-only directory) is left as it is and never written over from here.
`write` never writes a number that is not finite: a tenant holding one is not written (the
others are, then ValueError names it).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from cache.damaged_files import set_aside_or_leave
from cache.error_text import one_line_error
from cache.gap_memory import LearnedGaps, gaps_text, read_gaps, write_gaps
from cache.private_paths import make_private_dirs
from cache.tenant_files import TENANT_FILE_PREFIX, tenant_file_stem

GLOBAL_FILE = "_global.json"


@dataclass(frozen=True, slots=True)
class UnusableFile:
    """A file `GapFiles.read` left out, and why (a phrase: "could not be read (…)")."""

    path: Path
    why: str


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
        self._left: set[Path] = set()   # unusable files that could not be set aside: never written over
        self._global_text: str | None = None   # the global file's content as last written or read here

    def stale(self, marks: Mapping[str, int]) -> list[str]:
        """The tenants a save must write: changed since written here, or their file gone
        (never one whose damaged file had to be left in place)."""
        return [tenant for tenant, mark in marks.items()
                if (self._written.get(tenant) != mark or not self._path(tenant).exists())
                and self._path(tenant) not in self._left]

    def write(self, learned: LearnedGaps, marks: Mapping[str, int]) -> int:
        """Write the tenants in `learned` (with the `marks` they had when it was copied)
        and the global file if its content changed (or it is gone); the number of tenant
        files written. A part holding a number that is not finite is not written (nor
        marked): the rest are, then ValueError names what was left unwritten."""
        shared, parts = split_by_tenant(learned)
        make_private_dirs(self.directory)
        num_written = 0
        unwritten: list[str] = []
        for tenant, part in parts.items():
            if self._path(tenant) in self._left:
                continue
            try:
                write_gaps(part, self._path(tenant))
            except ValueError as exc:
                unwritten.append(f"tenant {tenant!r} ({exc})")
                continue
            num_written += 1
            if tenant in marks:
                self._written[tenant] = marks[tenant]
        if self.global_path not in self._left:
            try:
                text = gaps_text(shared)
            except ValueError as exc:
                unwritten.append(f"the all-tenant level ({exc})")
            else:
                if text != self._global_text or not self.global_path.exists():
                    write_gaps(shared, self.global_path)
                    self._global_text = text
        if unwritten:
            raise ValueError(f"gap statistics not written to {self.directory}: {'; '.join(unwritten)}")
        return num_written

    def mark_written(self, marks: Mapping[str, int]) -> None:
        """Note that the files here already hold these tenants as of `marks` (just read)."""
        self._written.update(marks)

    @property
    def global_path(self) -> Path:
        return self.directory / GLOBAL_FILE

    def exists(self) -> bool:
        """Whether anything was written here (the global file, or a tenant's)."""
        return self.global_path.exists() or any(self._tenant_paths())

    def read(self, return_features: tuple[int, ...]) -> tuple[LearnedGaps, list[UnusableFile]]:
        """Everything usable written here by a forecaster split by `return_features` (its
        configuration), and each file left out with why. A global file left out (or
        missing) leaves the all-tenant level empty; the tenants' files are read all the same."""
        return_features = tuple(return_features)
        parts, unusable = [], []
        for path in [self.global_path, *self._tenant_paths()]:
            if path == self.global_path and not path.exists():
                continue
            try:
                part = read_gaps(path)
            except ValueError as exc:
                unusable.append(UnusableFile(path, f"could not be read ({' '.join(str(exc).split())})"))
                continue
            except OSError as exc:
                unusable.append(UnusableFile(path, f"could not be read ({one_line_error(exc)})"))
                continue
            why = _misfit(path, part, return_features, is_global=path == self.global_path)
            if why is not None:
                unusable.append(UnusableFile(path, why))
                continue
            if path == self.global_path:   # (text, not the part: what adopts it changes it in place)
                self._global_text = gaps_text(part)
            parts.append(part)
        return merged(return_features, parts), unusable

    def set_aside(self, unusable: Iterable[UnusableFile]) -> None:
        """Rename each file `read` left out beside it (one warning line each); one that
        cannot be renamed is left where it is, and this never writes over it."""
        for file in unusable:
            if set_aside_or_leave(file.path, "the gap statistics", file.why) is None:
                self._left.add(file.path)

    def _tenant_paths(self) -> list[Path]:
        return sorted(self.directory.glob(f"{TENANT_FILE_PREFIX}*.json"))

    def _path(self, tenant: str) -> Path:
        return self.directory / f"{tenant_file_stem(tenant)}.json"


def _misfit(path: Path, part: LearnedGaps, return_features: tuple[int, ...], is_global: bool) -> str | None:
    """Why a file that was read cannot be used, or None: split by other return features,
    or holding other levels than its name says (the global file: the all-tenant level
    only; a tenant's: that tenant's only, so a copy of another tenant's file is not
    taken for that tenant)."""
    if tuple(part.return_features) != return_features:
        return f"is split by return features {tuple(part.return_features)}, configured for {return_features}"
    keys = (*part.gaps, *part.returns, *part.p_estimates)
    if is_global:
        return "holds levels of tenants, not only the all-tenant one" if part.steps or any(keys) else None
    if not all(keys):
        return "holds the all-tenant level, which belongs in the global file"
    tenants = set(part.steps) | {key[0] for key in keys}
    if len(tenants) > 1:
        return f"holds the levels of {len(tenants)} tenants, not of one"
    tenant = next(iter(tenants), None)
    if tenant is not None and (not isinstance(tenant, str) or f"{tenant_file_stem(tenant)}.json" != path.name):
        return f"holds tenant {tenant!r}, not the one its name is for"
    return None
