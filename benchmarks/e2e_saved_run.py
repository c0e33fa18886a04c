"""A saved end-to-end run read back (`bench_e2e.py --plot-from FILE` draws its plots again
without replaying): bench_e2e.py's output, whose last line is the run, or its JSON object
alone; anything else is named for what it is, never a traceback.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

if __name__ == "__main__":
    print("error: e2e_saved_run.py is a helper module, not a benchmark: "
          "it is used by bench_e2e.py (--plot-from FILE); run one of those", file=sys.stderr)
    sys.exit(2)


def read_saved_run(path: Path) -> dict | str:
    """A saved run at `path` (this script's output, whose last line is the run, or its JSON
    object alone), or why it cannot be one."""
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        return f"cannot read {path}: {exc.strerror or exc}"
    except UnicodeDecodeError as exc:
        return f"cannot read {path}: not UTF-8 text ({exc.reason})"
    try:
        saved = json.loads(text)  # a saved JSON object
    except json.JSONDecodeError:
        try:
            saved = json.loads(text.splitlines()[-1]) if text else None  # this script's output: the last line
        except json.JSONDecodeError:
            return f"{path} is not JSON, nor does its last line hold bench_e2e.py's JSON"
    if not isinstance(saved, dict) or not isinstance(saved.get("policies"), dict):
        return f"{path} is not bench_e2e.py's output (no 'policies' object)"
    return saved

