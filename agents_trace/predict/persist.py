"""Saving and loading predictor state as plain arrays (npz) and JSON, never pickle.

Layout of a directory: per tenant `<slug>.json` (names, lists, scalars) and `<slug>.npz`
(float/int arrays); `_global.json` / `_global.npz` for the global class model. The slug
is a filesystem-safe prefix of the tenant name plus a hash, and the JSON carries the
exact name, so any tenant string round-trips. Files are written to a temporary name and
renamed, so a crash never leaves a half-written file; the two renames are two steps, so
the JSON names the SHA-256 of the npz it was written with (`ARRAYS_DIGEST`), and a pair
from two saves (a crash between the renames: new arrays beside the old JSON) is found on
reading, as is one from before the digest whose arrays do not fit its JSON's vocabulary
and states (`UnusableFileError`, never a model that fails at every step). Loading uses
`allow_pickle=False`; a file that is not what `write` wrote raises `UnusableFileError`,
naming which of the pair is at fault (never with numpy's advice to unpickle it), as does
one holding a non-finite number (NaN or infinity, in the JSON or any array): `write`
never writes one (the JSON is written with `allow_nan=False`), or a number no learning
could make (`persist_checks.impossible_value`: a vocabulary without a base symbol, a probability row that is
no distribution, a negative count or weight, gap sums their count cannot make).
"""
from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path
from typing import Any

import numpy as np

from cache.atomic_file import replacing
from cache.damaged_files import set_aside_or_leave
from cache.error_text import one_line_error
from cache.private_paths import make_private_dirs
from cache.tenant_files import tenant_file_stem

from .config import PredictorConfig
from .durations import DurationModel
from .hmm import HmmParams
from .ngram import NgramTable
from .recency import RecencyMemory, RecencyParams
from .step_model import FitReport, StepModel
from .tenant import TenantState
from .turns import TurnCalibration, calibrate
from .persist_checks import impossible_value
from .vocabulary import BASE_SYMBOLS, MAX_KNOWN_TOOLS, Vocabulary

FORMAT = "stepahead-predict/1"
# The JSON's key for the SHA-256 (hex) of its npz's bytes; absent in files saved before it.
ARRAYS_DIGEST = "arrays_sha256"
GLOBAL_STEM = "_global"
ZIP_MAGIC = b"PK\x03\x04"   # an npz is a zip archive
PICKLE_MAGIC = b"\x80"      # a pickle (protocol 2 on) starts so
# The keys of a tenant's JSON as `write` saves `tenant_to_parts` now (`is_current`).
TENANT_KEYS = frozenset({"format", ARRAYS_DIGEST, "tenant", "model", "durations_symbols", "recency_decay",
                          "recent_sessions", "finished_sessions", "tool_counts", "accuracy", "num_learned",
                          "num_learned_at_fit", "abandons", "turn_offsets"})


def tenant_stem(tenant: str) -> str:
    return tenant_file_stem(tenant)


def model_to_parts(model: StepModel) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    r = model.report
    meta = {
        "vocab": list(model.vocab.symbols), "weights": list(model.weights),
        "abstract": model.abstract,
        "recency": None if model.recency is None else
        {"decay": model.recency.decay, "strength": model.recency.strength},
        "report": {"num_sessions": r.num_sessions, "num_states": r.num_states,
                   "seeded_from_bigram": r.seeded_from_bigram, "num_iter": r.num_iter,
                   "val_top1": r.val_top1, "val_logloss": r.val_logloss,
                   "num_val_symbols": r.num_val_symbols, "fit_s": r.fit_s},
    }
    arrays = {"hmm_start": model.hmm.start, "hmm_trans": model.hmm.trans,
              "hmm_emit": model.hmm.emit, **model.ngram.to_arrays()}
    return meta, arrays


def model_from_parts(meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> StepModel:
    symbols = meta["vocab"]
    vocab = Vocabulary(tuple(symbols), {s: i for i, s in enumerate(symbols)})
    recency = None if meta["recency"] is None else RecencyParams(
        float(meta["recency"]["decay"]), float(meta["recency"]["strength"]))
    w = [float(x) for x in meta["weights"]]
    weights = (w[0], w[1], w[2])
    r = meta["report"]
    report = FitReport(int(r["num_sessions"]), int(r["num_states"]),
                       bool(r["seeded_from_bigram"]), int(r["num_iter"]),
                       weights, recency, r["val_top1"], r["val_logloss"],
                       int(r["num_val_symbols"]), float(r["fit_s"]))
    hmm = HmmParams(np.asarray(arrays["hmm_start"], dtype=np.float64),
                    np.asarray(arrays["hmm_trans"], dtype=np.float64),
                    np.asarray(arrays["hmm_emit"], dtype=np.float64))
    return StepModel(vocab, hmm, NgramTable.from_arrays(arrays), weights,
                     recency, bool(meta["abstract"]), report)


def write(directory: Path, stem: str, meta: dict[str, Any],
          arrays: dict[str, np.ndarray]) -> None:
    """Atomically write `<stem>.npz` then `<stem>.json` (the JSON marks completeness and
    names the npz's digest, so `read` knows the pair belongs together)."""
    make_private_dirs(directory)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    data = buffer.getvalue()
    meta = {"format": FORMAT, **meta, ARRAYS_DIGEST: hashlib.sha256(data).hexdigest()}
    text = json.dumps(meta, allow_nan=False)   # a NaN raises here, before either file is replaced
    with replacing(directory / f"{stem}.npz", binary=True) as stream:
        stream.write(data)
    with replacing(directory / f"{stem}.json") as stream:
        stream.write(text)


class UnusableFileError(ValueError):
    """A saved file that cannot be used: `path` is the one of the json + npz pair at
    fault, `why` a phrase saying how ("could not be read (…)")."""

    def __init__(self, path: Path, why: str) -> None:
        super().__init__(f"{path} {why}")
        self.path = path
        self.why = why


def set_aside_damaged(json_path: Path, error: Exception) -> bool:
    """A saved pair that could not be used renamed aside, the file at fault named in the
    warning (never deleted); whether it was: False when the directory refused (one
    warning line too), and then nothing may be written over the pair."""
    if isinstance(error, UnusableFileError) and error.path.exists():
        bad, why = error.path, error.why
    else:
        bad = json_path
        why = error.why if isinstance(error, UnusableFileError) else f"could not be read ({one_line_error(error)})"
    pair = [json_path, json_path.with_suffix(".npz")]
    return set_aside_or_leave(bad, "the predictor's saved state", why,
                              companions=[p for p in pair if p != bad]) is not None


def read(json_path: Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The parts of a saved pair; UnusableFileError (or an error of json) if it is not what
    one `write` wrote: an npz whose digest is not the JSON's, or (in a file saved without
    the digest) arrays whose shapes do not fit the JSON's vocabulary, states and symbols."""
    def non_finite(constant: str) -> float:
        raise UnusableFileError(json_path, f"holds a non-finite number ({constant})")

    meta = json.loads(json_path.read_text(), parse_constant=non_finite)
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise UnusableFileError(json_path, f"is not a {FORMAT} file")
    npz_path = json_path.with_suffix(".npz")
    try:
        data = npz_path.read_bytes()
    except FileNotFoundError as exc:
        raise UnusableFileError(json_path, f"has no arrays ({one_line_error(exc)})") from exc
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            arrays = {k: np.array(npz[k]) for k in npz.files}
    except Exception as exc:   # numpy, zipfile and OS errors alike: the arrays are not usable
        reason = one_line_error(exc)
        if "pickle" in str(exc):   # numpy says so for any bytes that are neither zip nor .npy
            pickled = data.startswith(ZIP_MAGIC) or data.startswith(PICKLE_MAGIC)
            reason = "it holds pickled objects, which are never loaded" if pickled else "it is not a zip archive"
        raise UnusableFileError(npz_path, f"could not be read (not an npz file of plain arrays: {reason})") from exc
    digest = meta.get(ARRAYS_DIGEST)
    if digest is not None and digest != hashlib.sha256(data).hexdigest():
        raise UnusableFileError(json_path, f"and {npz_path.name} are not from the same save (the arrays' "
                                           "digest is not the one the JSON names)")
    misfit = _misfit(meta, arrays)
    if misfit:
        raise UnusableFileError(json_path, f"and {npz_path.name} are not from the same save ({misfit})")
    for key, array in arrays.items():
        if array.dtype.kind in "fc" and not np.isfinite(array).all():
            raise UnusableFileError(npz_path, f"holds non-finite numbers (NaN or infinity in {key})")
    impossible = impossible_value(meta, arrays)
    if impossible:
        in_arrays, what = impossible
        raise UnusableFileError(npz_path if in_arrays else json_path, f"holds {what}, which no learning makes")
    return meta, arrays


def _misfit(meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> str | None:
    """How the arrays' shapes do not fit the JSON (the model's vocabulary and states, the
    duration symbols), or None when they do or the JSON lacks those parts (which then
    fails where it is parsed)."""
    def shape(key: str) -> tuple[int, ...] | None:
        return tuple(arrays[key].shape) if key in arrays else None

    model = meta.get("model")
    if isinstance(model, dict) and isinstance(model.get("vocab"), list):
        v = len(model["vocab"])
        start, probs = shape("hmm_start"), shape("ngram_probs")
        if start is None or len(start) != 1:
            return f"hmm_start has shape {start}"
        if probs is None or len(probs) != 2:
            return f"ngram_probs has shape {probs}"
        k = start[0]
        for key, want in (("hmm_trans", (k, k)), ("hmm_emit", (k, v)), ("ngram_probs", (probs[0], v))):
            got = shape(key)
            if got != want:
                return f"{key} has shape {got}, not {want} for the JSON's {v} symbols and {k} states"
    names = meta.get("durations_symbols")
    if isinstance(names, list):
        got = shape("durations_stats")
        if got != (len(names), 3):
            return f"durations_stats has shape {got}, not {(len(names), 3)} for the JSON's {len(names)} symbols"
    return None


def tenant_to_parts(tenant: TenantState) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Everything needed to resume a tenant (taken under its lock). Live sessions are
    not saved: they are re-learned from their next steps after a restart."""
    with tenant.lock:
        model = tenant.model
        names, stats = tenant.durations.to_arrays()
        acc = tenant.accuracy
        meta: dict[str, Any] = {
            "tenant": tenant.name,
            "model": None,
            "durations_symbols": names,
            "recency_decay": tenant.memory.decay,
            "recent_sessions": [list(s) for s in tenant.memory.sessions],
            "finished_sessions": [list(s) for s in tenant.finished],
            "tool_counts": dict(tenant.tool_counts),
            "accuracy": {"top1": acc.top1, "logloss": acc.logloss, "weight": acc.weight,
                         "num_scored": acc.num_scored},
            "num_learned": tenant.num_learned,
            "num_learned_at_fit": tenant.num_learned_at_fit,
            "abandons": {"abandoned": tenant.abandons.abandoned,
                         "continued": tenant.abandons.continued},
            "turn_offsets": list(tenant.turns.offsets),
        }
    arrays: dict[str, np.ndarray] = {"durations_stats": stats}
    if model is not None:
        meta["model"], model_arrays = model_to_parts(model)
        arrays.update(model_arrays)
    return meta, arrays


def is_current(meta: dict[str, Any]) -> bool:
    """Whether a tenant's saved JSON has everything `tenant_to_parts` writes now (one saved
    before a part was kept, or before the tool names a tenant keeps were bounded, is written
    again, with it, at the next save)."""
    return (TENANT_KEYS <= meta.keys() and len(meta["tool_counts"]) <= MAX_KNOWN_TOOLS
            and len(meta["durations_symbols"]) <= MAX_KNOWN_TOOLS + len(BASE_SYMBOLS) + 2)


def tenant_from_parts(meta: dict[str, Any], arrays: dict[str, np.ndarray],
                      config: PredictorConfig) -> TenantState:
    tenant = TenantState(str(meta["tenant"]), config)
    tenant.durations = DurationModel.from_arrays(
        config.durations, list(meta["durations_symbols"]), arrays["durations_stats"])
    tenant.memory = RecencyMemory(float(meta["recency_decay"]), config.max_recent_sessions)
    for seq in meta["recent_sessions"]:
        tenant.memory.learn(tuple(seq))
    tenant.finished.extend(tuple(s) for s in meta["finished_sessions"])
    tenant.tool_counts = {str(k): int(v) for k, v in meta["tool_counts"].items()}
    acc = meta["accuracy"]
    tenant.accuracy.top1, tenant.accuracy.logloss = float(acc["top1"]), float(acc["logloss"])
    tenant.accuracy.weight, tenant.accuracy.num_scored = float(acc["weight"]), int(acc["num_scored"])
    tenant.num_learned = int(meta["num_learned"])
    tenant.num_learned_at_fit = int(meta["num_learned_at_fit"])
    abandons = meta.get("abandons") or {}  # absent in files saved before it was learned
    tenant.abandons.abandoned = float(abandons.get("abandoned", 0.0))
    tenant.abandons.continued = float(abandons.get("continued", 0.0))
    if meta["model"] is not None:
        tenant.model = model_from_parts(meta["model"], arrays)
        if "turn_offsets" in meta:
            tenant.turns = TurnCalibration(tuple(float(x) for x in meta["turn_offsets"]))
        elif config.turn_odds_cap:  # saved before turns were calibrated
            tenant.turns = calibrate(tenant.model, list(tenant.finished), config.silent_symbols,
                                     config.turn_odds_cap, config.turn_odds_strength)
    tenant.bound_tools()   # a file saved before the names a tenant keeps were bounded
    return tenant
