"""A `Predictor`'s files: what it learned, written per tenant and read back on start.

`PredictorFiles` is a part of `agents_trace.predict.predictor.Predictor` (a base class),
kept apart so that each file holds one concept. It uses the predictor's `_tenants`,
`_tenants_lock`, the global model's fields under `_global_lock`, and `_written`.

Invariants: a tenant is written again only when it changed since it was last written to
that directory or read from it (or its file is gone), so a restart rewrites nothing it
did not change; files are plain npz + json (persist.py), never pickle; a file that cannot
be used either raises or, with `on_damaged`, is left out and only its tenant starts anew.
A tenant's file is used only for the tenant its name is for (`persist.tenant_stem`): a
copy of another tenant's file under that name must not replace that tenant's state (nor
be saved over its good file later). A damaged file that `on_damaged` could not set aside
is never written over from here.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from . import persist
from .config import PredictorConfig
from .tenant import TenantState


class PredictorFiles:
    """The save / load side of a `Predictor`."""

    def save(self, directory: str | Path) -> None:
        """Write every tenant changed since it was last written to `directory` (and the
        global model, if changed) as npz + json; unchanged tenants whose files are there
        are not written again (for thousands of idle tenants a checkpoint is a file check each)."""
        directory = Path(directory)
        written = self._written.setdefault(str(directory.resolve()), {})
        for name in self.tenants():
            state = self._tenants[name]
            mark = (state, state.num_changes)   # read before the parts: a later change is written next time
            stem = persist.tenant_stem(name)
            if ("left", stem) in written:
                continue
            if written.get(("tenant", name)) != mark or not (directory / f"{stem}.json").exists():
                meta, arrays = persist.tenant_to_parts(state)
                persist.write(directory, stem, meta, arrays)
                written[("tenant", name)] = mark
        if ("left", persist.GLOBAL_STEM) in written:
            return
        with self._global_lock:
            model = self._global_model
            mark = self._global_changes
            if written.get(("global",)) == mark and (directory / f"{persist.GLOBAL_STEM}.json").exists():
                return
            meta = {"sessions": [list(s) for s in self._global_sessions],
                    "num_learned": self._global_learned, "model": None}
        arrays: dict[str, np.ndarray] = {}
        if model is not None:
            meta["model"], arrays = persist.model_to_parts(model)
        persist.write(directory, persist.GLOBAL_STEM, meta, arrays)
        written[("global",)] = mark

    @classmethod
    def restored(cls, directory: str | Path, config: PredictorConfig | None = None, **options):
        """A predictor resumed from `directory` (as written by `save`), or an empty one
        when the directory does not exist yet: what the gateway calls on start (`options`
        go to the constructor)."""
        predictor = cls(config, **options)
        if Path(directory).is_dir():
            predictor.load(directory, on_damaged=persist.set_aside_damaged)
            predictor.request_due_refits()
        return predictor

    def request_due_refits(self) -> list[str]:
        """Queue the background refit of each tenant a load left due (the sessions a
        gateway learned at its stop are saved unfitted, and nothing else asked for their
        fit until one of the tenant's sessions ended after the restart: QA215 F1); the
        tenants queued. None without background refits (a replay refits as it goes)."""
        if not self.config.background_refits:
            return []
        with self._tenants_lock:
            names = sorted(self._tenants)
        return [name for name in names if self.refit_due(name) and self.request_refit(name)]

    def load(self, directory: str | Path,
             on_damaged: Callable[[Path, Exception], bool] | None = None) -> None:
        """Replace this predictor's tenants and global model with those saved in
        `directory` (as written by `save`); what was read counts as written there (except
        a file saved before one of its parts, or the arrays' digest, was kept: the next
        save writes it again). A file that cannot be used raises; or, with `on_damaged`,
        is handed to it with the error and left out (its tenant starts anew), the other
        files loaded. `on_damaged` says whether it moved the file away; when it did not,
        `save` never writes over it."""
        directory = Path(directory)
        left: list[str] = []

        def parsed(path: Path, parse: Callable[[dict, dict], object]):
            """`parse` of the file's parts; None once a file that cannot be used went to `on_damaged`."""
            try:
                return parse(*persist.read(path))
            except Exception as exc:   # any of json, numpy and our checks: the file is not usable
                if on_damaged is None:
                    raise
                if not on_damaged(path, exc):
                    left.append(path.stem)
                return None

        def tenant_state(path: Path) -> Callable[[dict, dict], tuple[TenantState, bool]]:
            def parse(meta: dict, arrays: dict) -> tuple[TenantState, bool]:
                name = meta.get("tenant")
                if not isinstance(name, str) or persist.tenant_stem(name) != path.stem:
                    raise persist.UnusableFileError(path, f"holds tenant {name!r}, not the one its name is for")
                return persist.tenant_from_parts(meta, arrays, self.config), persist.is_current(meta)
            return parse

        def global_parts(meta: dict, arrays: dict) -> tuple:
            return (tuple(tuple(s) for s in meta["sessions"]), int(meta["num_learned"]),
                    None if meta["model"] is None else persist.model_from_parts(meta["model"], arrays),
                    persist.ARRAYS_DIGEST in meta)

        loaded = [parsed(path, tenant_state(path)) for path in sorted(directory.glob("t-*.json"))]
        tenants = {state.name: state for state, _ in filter(None, loaded)}
        global_path = directory / f"{persist.GLOBAL_STEM}.json"
        saved_global = parsed(global_path, global_parts) if global_path.exists() else None
        written: dict[tuple, object] = {("left", stem): True for stem in left}
        written.update({("tenant", state.name): (state, state.num_changes)
                        for state, is_current in filter(None, loaded) if is_current})
        with self._tenants_lock:
            self._tenants = tenants
        if saved_global is not None:
            sessions, num_learned, model, is_current = saved_global
            with self._global_lock:
                self._global_sessions.clear()
                self._global_sessions.extend(sessions)
                self._global_learned = self._global_learned_at_fit = num_learned
                self._global_changes += 1
                self._global_model = model
                if is_current:   # one saved before the digest is written again, with it
                    written[("global",)] = self._global_changes
        self._written[str(directory.resolve())] = written
