"""Time a refit and forecasts on recorded tool sequences.

    python -m agents_trace.predict.timing --data FILE.jsonl [--sessions 1000] [--repeats 3]

Takes the file's sequences in order (cycling through them until `--sessions` are
collected), fits one tenant model from them `--repeats` times (after one warm-up fit),
then replays 200 sessions through observe/forecast. Prints one JSON line: the refit wall
times (min and median), forecast p50/p99 in microseconds, and the load average, since
these machines are shared and timings move with it.

The file is read as `agents_trace.predict.eval` reads it (`lines_or_exit_status`), with its exit
statuses: a file that cannot be read or a line that is not JSON is exit status 2, a file
with no tool sequences (no line has a `steps` list: a request trace, say) exit status 1,
each with one `error:` line on stderr; lines without `steps` are left out, counted in one
`warning:` line. `--sessions` and `--repeats` are at least 1 (a usage error, exit 2).
Ctrl+C stops it with one line and exit status 130, and a reader of stdout that leaves ends
it quietly with 141, as every command of ours (`cache.stdout_reader.run_command`).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from itertools import cycle, islice
from typing import Sequence

from cache.cli_args import positive_int
from cache.stdout_reader import run_command, stopped_while_loading

PROGRAM = "python -m agents_trace.predict.timing"

with stopped_while_loading(__name__, PROGRAM):
    import numpy as np

    from .config import PredictorConfig
    from .eval import lines_or_exit_status
    from .fit import fit_step_model
    from .predictor import Predictor


def measure(sequences: Sequence[Sequence[str]], num_sessions: int, repeats: int) -> dict:
    sessions = [list(s) for s in islice(cycle(sequences), num_sessions)]
    config = PredictorConfig(background_refits=False)
    fit_step_model(sessions, config.fit)  # warm-up
    fit_s = []
    for _ in range(repeats):
        started = time.perf_counter()
        model = fit_step_model(sessions, config.fit)
        fit_s.append(time.perf_counter() - started)

    predictor = Predictor(config)
    predictor.fit_sequences("t", sessions)
    forecast_ns = []
    for i, steps in enumerate(sessions[:200]):
        for t, symbol in enumerate(steps):
            started = time.perf_counter_ns()
            predictor.forecast("t", f"s{i}", float(t))
            forecast_ns.append(time.perf_counter_ns() - started)
            predictor.observe("t", f"s{i}", symbol, float(t))
        predictor.end_session("t", f"s{i}", learn=False)
    predictor.close()
    us = np.asarray(forecast_ns, dtype=np.float64) / 1000.0
    return {"sessions": num_sessions, "num_symbols": model.vocab.size,
            "num_states": model.report.num_states, "refit_s_min": round(min(fit_s), 3),
            "refit_s_median": round(statistics.median(fit_s), 3),
            "forecast_us_p50": round(float(np.percentile(us, 50)), 1),
            "forecast_us_p99": round(float(np.percentile(us, 99)), 1),
            "loadavg_1m": round(os.getloadavg()[0], 2)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROGRAM, description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="tool-sequence JSONL file")
    parser.add_argument("--sessions", type=positive_int, default=1000,
                        help="sessions to fit from, cycling through the file's (default %(default)s)")
    parser.add_argument("--repeats", type=positive_int, default=3,
                        help="timed refits after the warm-up (default %(default)s)")
    args = parser.parse_args(argv)
    lines, status = lines_or_exit_status(args.data)
    if lines is None:
        return status
    sequences = [line.steps[:-1] for line in lines]   # (without the END `read_lines` appends)
    if not any(sequences):   # every `steps` list empty: nothing to fit (QA131: an IndexError)
        print(f"error: {args.data} holds only empty tool sequences", file=sys.stderr)
        return 1
    print(json.dumps(measure(sequences, args.sessions, args.repeats)))
    return 0


if __name__ == "__main__":
    raise SystemExit(run_command(main, PROGRAM))
