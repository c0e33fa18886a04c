"""Evaluate next-step forecasts on recorded tool sequences.

    python -m agents_trace.predict.eval --data FILE.jsonl [--json] [--frozen]

Input lines: {"id", "domain", "steps": [...]}; `domain` is the tenant. A line without a
`steps` list of strings is left out and counted (one line on stderr says how many); a file
with no tool sequences at all, or with none left to score (no test line: QA160), is exit
status 1, a file that cannot be read or a line that is not JSON exit status 2, each with
one line on stderr. Lines with an even
0-based index train, odd ones test; `END` is appended to every sequence and every symbol
of a test sequence is predicted from the start state onward, through the predictor's
public API (`observe` / `forecast`). Unigram and bigram add-0.1 baselines over the same
per-tenant vocabulary (training symbols + USER/ASSISTANT_TEXT/END + OOV) run alongside.

Protocol. The models are fitted on the training lines only (each tenant's validation
split lies inside them). The file is then replayed in order, as a live gateway would see
it. Default (online): a training line is fed to the tenant's recency memory, a test line
is predicted step by step and then learned like any finished session (the baselines
learn it too, after scoring), and a tenant is refitted whenever the predictor's own
refit rule says it is due (`--no-refit`: never). `--frozen`: nothing is learned after
the fit, the recency memory stays empty, and nothing is refitted (so `--no-refit` with it
is a usage error, exit status 2: it would change nothing).

Prints one JSON line with --json: predictor / bigram / unigram {top1, top3, logloss, n},
fit_s_per_tenant (mean wall time of the tenant fits) and forecast_us_p50 / _p99 (wall
time of `forecast` calls).

Progress bars (the fit, then the scoring) go to stderr only when it is a terminal. Run as
a command (`cache.stdout_reader.run_command`, as agents_trace.predict.timing), Ctrl+C stops it
with one line, "PROGRAM: stopped", and exit status 130, and a reader of stdout that leaves
(`| head`) ends it quietly with 141 (cache/stdout_reader.py), as `stepahead` and
`python -m cache.sim` end (QA221 F1, F2).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass
from typing import Sequence

from cache.stdout_reader import run_command, stopped_while_loading

PROGRAM = "python -m agents_trace.predict.eval"

with stopped_while_loading(__name__, PROGRAM):
    import numpy as np
    from tqdm import tqdm

    from cache.forecast import END_SYMBOL

    from .baselines import AddAlphaNgram
    from .config import PredictorConfig
    from .predictor import Predictor
    from .vocabulary import Vocabulary

BASELINE_ALPHA = 0.1


@dataclass(slots=True)
class Line:
    index: int
    tenant: str
    session: str
    steps: list[str]


@dataclass(slots=True)
class Score:
    """Running top-1 / top-3 / log-loss over predicted positions."""

    loss: float = 0.0
    top1: int = 0
    top3: int = 0
    n: int = 0

    def add(self, probs: np.ndarray, target: int) -> None:
        order = np.argsort(-probs, kind="stable")[:3]
        self.loss -= math.log(max(float(probs[target]), 1e-300))
        self.top1 += int(order[0] == target)
        self.top3 += int(target in order)
        self.n += 1

    def summary(self) -> dict[str, float | int]:
        n = max(self.n, 1)
        return {"top1": round(self.top1 / n, 4), "top3": round(self.top3 / n, 4),
                "logloss": round(self.loss / n, 4), "n": self.n}


class DataError(ValueError):
    """The data file cannot be evaluated; the message is one line saying why."""


def read_lines(path: str) -> tuple[list[Line], int]:
    """The tool sequences of a JSONL file, and how many lines had no `steps` list (left
    out). DataError for a file that cannot be read or a line that is not JSON."""
    lines, without_steps = [], 0
    try:
        with open(path) as f:
            for i, raw in enumerate(f):
                if not raw.strip():
                    continue
                try:
                    row = json.loads(raw)
                except ValueError as exc:
                    raise DataError(f"{path}: line {i + 1} is not JSON ({exc})") from None
                if not isinstance(row, dict) or not isinstance(row.get("steps"), list) \
                        or not all(isinstance(step, str) for step in row["steps"]):
                    without_steps += 1
                    continue
                steps = list(row["steps"])
                if steps and steps[-1] == END_SYMBOL:
                    steps = steps[:-1]
                lines.append(Line(i, str(row.get("domain") or "default"),
                                  str(row.get("id", f"line-{i}")), steps + [END_SYMBOL]))
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: cannot be read ({exc})") from None
    return lines, without_steps


def _project(next_step: dict[str, float], vocab: Vocabulary) -> np.ndarray:
    """A forecast's distribution on the scoring vocabulary (unknown keys -> OOV)."""
    probs = np.zeros(vocab.size)
    for symbol, p in next_step.items():
        probs[vocab.encode_one(symbol)] += p
    return probs / probs.sum()


def evaluate(lines: Sequence[Line], online: bool = True, refits: bool = True,
             config: PredictorConfig | None = None, progress: bool = False) -> dict:
    """The scores of `lines` (see the module's docstring); `progress`: bars on stderr."""
    config = config or PredictorConfig(background_refits=False)
    train: dict[str, list[list[str]]] = {}
    for line in lines:
        if line.index % 2 == 0:
            train.setdefault(line.tenant, []).append(line.steps)
    tenants = list(dict.fromkeys(line.tenant for line in lines))
    vocabs = {t: Vocabulary.from_sequences(train.get(t, [])) for t in tenants}
    baselines: dict[str, tuple[AddAlphaNgram, AddAlphaNgram]] = {}
    for t in tenants:
        uni = AddAlphaNgram(1, BASELINE_ALPHA, vocabs[t].size)
        bi = AddAlphaNgram(2, BASELINE_ALPHA, vocabs[t].size)
        for seq in train.get(t, []):
            ids = vocabs[t].encode(seq)
            uni.learn(ids)
            bi.learn(ids)
        baselines[t] = (uni, bi)

    predictor = Predictor(config)
    fit_times = []
    with tqdm(list(train), desc="fitting tenants", file=sys.stderr, delay=2.0, leave=False,
              disable=not progress) as fitting:
        for tenant in fitting:
            started = time.perf_counter()
            model = predictor.fit_sequences(tenant, train[tenant], remember=False)
            if model is not None:
                fit_times.append(time.perf_counter() - started)
    predictor.refit_global()

    scores = {"predictor": Score(), "bigram": Score(), "unigram": Score()}
    forecast_ns: list[int] = []
    with tqdm(total=sum(line.index % 2 for line in lines), desc="scoring", unit="seq", file=sys.stderr,
              delay=2.0, leave=False, disable=not progress) as scoring:
        for line in lines:
            if line.index % 2 == 0:
                if online:
                    predictor.remember(line.tenant, line.steps)
                continue
            vocab = vocabs[line.tenant]
            uni, bi = baselines[line.tenant]
            ids = vocab.encode(line.steps)
            for t, symbol in enumerate(line.steps):
                now_s = float(t)
                started = time.perf_counter_ns()
                forecast = predictor.forecast(line.tenant, line.session, now_s)
                forecast_ns.append(time.perf_counter_ns() - started)
                scores["predictor"].add(_project(forecast.next_step, vocab), ids[t])
                scores["bigram"].add(bi.next_distribution(ids[:t]), ids[t])
                scores["unigram"].add(uni.next_distribution(ids[:t]), ids[t])
                if symbol == END_SYMBOL:
                    predictor.end_session(line.tenant, line.session, learn=online)
                else:
                    predictor.observe(line.tenant, line.session, symbol, now_s)
            if online:
                uni.learn(ids)
                bi.learn(ids)
                if refits and predictor.refit_due(line.tenant):
                    predictor.refit(line.tenant)  # synchronous: the run stays deterministic
            scoring.update(1)
    predictor.close()

    latency_us = np.asarray(forecast_ns, dtype=np.float64) / 1000.0
    return {
        "predictor": scores["predictor"].summary(),
        "bigram": scores["bigram"].summary(),
        "unigram": scores["unigram"].summary(),
        "fit_s_per_tenant": round(float(np.mean(fit_times)), 4) if fit_times else 0.0,
        "forecast_us_p50": round(float(np.percentile(latency_us, 50)), 1) if forecast_ns else 0.0,
        "forecast_us_p99": round(float(np.percentile(latency_us, 99)), 1) if forecast_ns else 0.0,
    }


def _table(result: dict) -> str:
    rows = [f"{'model':<10} {'top1':>7} {'top3':>7} {'logloss':>8} {'n':>7}"]
    for name in ("predictor", "bigram", "unigram"):
        r = result[name]
        rows.append(f"{name:<10} {r['top1']:>7.4f} {r['top3']:>7.4f} {r['logloss']:>8.4f} "
                    f"{r['n']:>7d}")
    bigram_loss = result["bigram"]["logloss"]
    if bigram_loss > 0:
        gain = 1.0 - result["predictor"]["logloss"] / bigram_loss
        rows.append(f"log-loss vs bigram: {gain:.1%} lower")
    rows.append(f"fit per tenant: {result['fit_s_per_tenant']:.3f} s   forecast: "
                f"p50 {result['forecast_us_p50']:.1f} us, p99 {result['forecast_us_p99']:.1f} us")
    return "\n".join(rows)


def lines_or_exit_status(path: str) -> tuple[list | None, int]:
    """The file's tool sequences (`read_lines`) and 0; or None and the exit status, its
    reason printed in one `error:` line: 2 for a file that cannot be read or a line that is
    not JSON, 1 for a file without tool sequences. Lines without `steps` are left out, in
    one `warning:` line."""
    try:
        lines, without_steps = read_lines(path)
    except DataError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None, 2
    if without_steps:
        print(f"warning: {path}: {without_steps} line(s) have no `steps` list of strings; left out",
              file=sys.stderr)
    if not lines:
        print(f"error: {path} holds no tool sequences (no line has a `steps` list)", file=sys.stderr)
        return None, 1
    return lines, 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROGRAM, description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="tool-sequence JSONL file")
    parser.add_argument("--json", action="store_true", help="print one JSON line")
    replay_mode = parser.add_mutually_exclusive_group()   # frozen never refits: --no-refit would change nothing
    replay_mode.add_argument("--frozen", action="store_true",
                             help="learn nothing after the fit (no online replay, no refits)")
    replay_mode.add_argument("--no-refit", action="store_true",
                             help="online: never refit during the replay (recency memory only); not with --frozen")
    args = parser.parse_args(argv)
    lines, status = lines_or_exit_status(args.data)
    if lines is None:
        return status
    result = evaluate(lines, online=not args.frozen, refits=not args.no_refit, progress=sys.stderr.isatty())
    if not result["predictor"]["n"]:   # a score of nothing reads as a perfect one
        print(f"error: {args.data} leaves nothing to score: its {len(lines)} tool sequence(s) all train "
              "(each tenant's odd-indexed lines test)", file=sys.stderr)
        return 1
    print(json.dumps(result) if args.json else _table(result))
    return 0


if __name__ == "__main__":
    sys.exit(run_command(main, PROGRAM))
