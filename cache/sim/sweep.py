"""Several simulator runs side by side: the comparison table and the capacity plot.

`comparison_rows` turns runs (the simulator's JSON results, each with a `label`, usually
the policy) into one row per run with the figures people compare: block and token hit
rates, mean and p99 simulated TTFT, LRU's mean TTFT over this run's (when an `lru` run
has the same memory) and the share of the LRU -> Belady block-hit gap closed (when both
ran). `plot_policies` draws block hit rate and mean simulated TTFT against HOT blocks,
one line per label; `plot_problem` says, before any run, why it could not. Invariant: a
ratio is only ever taken between runs of the same HOT and HOST sizes.
"""
from __future__ import annotations

import importlib.util
import io
import tempfile
from collections.abc import Sequence
from pathlib import Path

REACTIVE_AND_BOUNDS = ("lru", "predictive", "belady")   # solid lines
ANCHORS = ("ttl", "kvflow")                              # dashed lines


def _label_order(label: str) -> tuple:
    return (label not in REACTIVE_AND_BOUNDS, label not in ANCHORS,
            REACTIVE_AND_BOUNDS.index(label) if label in REACTIVE_AND_BOUNDS else 0, label)


def gap_closed(run: dict, lru: dict, belady: dict) -> float | None:
    """The share of the LRU -> Belady block-hit gap `run` closed; None when there is no gap."""
    span = belady["block_hit_rate"] - lru["block_hit_rate"]
    return round((run["block_hit_rate"] - lru["block_hit_rate"]) / span, 3) if span > 0 else None


def lru_ttft_ratio(run: dict, lru: dict) -> float | None:
    """LRU's mean simulated TTFT over `run`'s; None when `run`'s is zero, or either is
    None (no request measured)."""
    if lru["sim_ttft_mean_s"] is None or not run["sim_ttft_mean_s"]:
        return None
    return round(lru["sim_ttft_mean_s"] / run["sim_ttft_mean_s"], 3)


def comparison_rows(runs: Sequence[dict]) -> list[dict]:
    """One row per run, grouped by memory (HOT, HOST), labels in a fixed order."""
    groups: dict[tuple[int, int], dict[str, dict]] = {}
    for run in runs:
        groups.setdefault((run["hot_blocks"], run["host_blocks"]), {})[run["label"]] = run
    rows = []
    for (hot, host), by_label in sorted(groups.items()):
        lru, belady = by_label.get("lru"), by_label.get("belady")
        for label in sorted(by_label, key=_label_order):
            run = by_label[label]
            row = {"hot_blocks": hot, "host_blocks": host, "label": label,
                   "block_hit_rate": run["block_hit_rate"], "token_hit_rate": run["token_hit_rate"],
                   "sim_ttft_mean_s": run["sim_ttft_mean_s"], "sim_ttft_p99_s": run["sim_ttft_p99_s"],
                   "lru_ttft_ratio": None, "gap_closed": None}
            if lru is not None:
                row["lru_ttft_ratio"] = lru_ttft_ratio(run, lru)
                if belady is not None:
                    row["gap_closed"] = gap_closed(run, lru, belady)
            rows.append(row)
    return rows


def comparison_table(rows: Sequence[dict]) -> str:
    """`comparison_rows` as aligned text, a blank line between memory sizes."""
    header = (f"{'hot':>7} {'host':>7}  {'policy':<11} {'block hit':>9} {'token hit':>9} "
              f"{'TTFT mean s':>11} {'TTFT p99 s':>10} {'LRU/this':>8} {'gap closed':>10}")
    lines = [header]
    previous = None
    for row in rows:
        if previous is not None and (row["hot_blocks"], row["host_blocks"]) != previous:
            lines.append("")
        previous = (row["hot_blocks"], row["host_blocks"])
        ratio = "-" if row["lru_ttft_ratio"] is None else f"{row['lru_ttft_ratio']:.3f}x"
        gap = "-" if row["gap_closed"] is None else f"{round(row['gap_closed'], 2) + 0.0:.2f}"   # never -0.00
        lines.append(f"{row['hot_blocks']:>7} {row['host_blocks']:>7}  {row['label']:<11} "
                     f"{row['block_hit_rate']:>9.4f} {row['token_hit_rate']:>9.4f} "
                     f"{row['sim_ttft_mean_s']:>11.4f} {row['sim_ttft_p99_s']:>10.4f} {ratio:>8} {gap:>10}")
    return "\n".join(lines)


def plot_format(path: Path) -> str:
    """The image format `path` names by its suffix; a path without one is a PNG, written
    at `path` as it is (matplotlib would otherwise add ".png")."""
    return path.suffix[1:].lower() or "png"


def plot_problem(path: Path) -> str | None:
    """Why `plot_policies` cannot write `path` (None: it can), found before the runs: no
    matplotlib, a suffix matplotlib has no writer for (none: PNG), a format whose writer
    needs what is missing (pgf: LaTeX; found by drawing a tiny figure to memory), or a
    place where creating its folder (as the plot does) and a scratch file in it fails."""
    if importlib.util.find_spec("matplotlib") is None:
        return "drawing it needs matplotlib (pip install matplotlib)"
    if path.is_dir():
        return "is a directory"
    from matplotlib.backend_bases import FigureCanvasBase
    from matplotlib.figure import Figure

    formats = FigureCanvasBase.get_supported_filetypes()
    fmt = plot_format(path)
    if fmt not in formats:
        return (f"matplotlib cannot draw to a {path.suffix!r} file; name it .png or one of "
                f"{', '.join('.' + name for name in sorted(formats) if name != 'png')}")
    if fmt != "png":
        trial = Figure(figsize=(1, 1))
        trial.text(0.5, 0.5, "x")
        try:
            trial.savefig(io.BytesIO(), format=fmt)
        except (OSError, RuntimeError, ValueError) as exc:
            return f"cannot draw a {path.suffix!r} file here: {exc}".splitlines()[0]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():
            with open(path, "r+b"):
                pass
        else:
            with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".plot-", suffix=".png"):
                pass
    except OSError as exc:
        return f"cannot write there: {exc.strerror or exc}"
    return None


def plot_policies(runs: Sequence[dict], path: Path, title: str) -> None:
    """Block hit rate and mean simulated TTFT against HOT blocks (log axis), one line per
    label, to an image at `path` in the format its suffix names (`plot_format`; its
    folder is created)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = sorted({run["label"] for run in runs}, key=_label_order)
    fig, (hits_ax, ttft_ax) = plt.subplots(1, 2, figsize=(11, 4.2))
    for label in labels:
        points = sorted((run["hot_blocks"], run["block_hit_rate"], run["sim_ttft_mean_s"])
                        for run in runs if run["label"] == label)
        style = "-o" if label in REACTIVE_AND_BOUNDS else "--s" if label in ANCHORS else ":x"
        hits_ax.plot([p[0] for p in points], [p[1] for p in points], style, label=label)
        ttft_ax.plot([p[0] for p in points], [p[2] for p in points], style, label=label)
    capacities = sorted({run["hot_blocks"] for run in runs})
    for ax, ylabel in ((hits_ax, "block hit rate (leading run)"), (ttft_ax, "mean simulated TTFT (s)")):
        ax.set_xscale("log")
        ax.set_xticks(capacities, [f"{c / 1000:g}k" if c >= 1000 else str(c) for c in capacities])
        ax.minorticks_off()
        ax.set_xlabel("HOT blocks")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
    hits_ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, format=plot_format(path))
    plt.close(fig)
