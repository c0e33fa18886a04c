"""Tool-transition patterns learned from recorded agent tool sequences.

A first-order Markov chain per domain over step symbols (`USER`, tool names,
`ASSISTANT_TEXT`/`FINISH`, and a terminal `END`), fitted by counting transitions in
trajectory files of the `{"id", "domain", "steps": [...]}` form (shared/data). Sampling
from it yields new sessions that move between tools the way the recorded agents did.
"""
from __future__ import annotations

import json
import random
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

START = "START"
END = "END"
TEXT_ANSWERS = frozenset({"ASSISTANT_TEXT", "FINISH"})
USER = "USER"
MAX_SESSION_STEPS = 60


@dataclass(frozen=True, slots=True)
class ToolPatterns:
    """Transition counts of one domain: `transitions[a]` maps next symbol -> count."""

    domain: str
    transitions: dict[str, dict[str, int]]

    @property
    def tools(self) -> list[str]:
        symbols = {s for nxt in self.transitions.values() for s in nxt} | set(self.transitions)
        return sorted(s for s in symbols if s not in TEXT_ANSWERS | {USER, START, END})

    def sample_session(self, rng: random.Random) -> list[str]:
        """A symbol sequence from START's successor to the last symbol before END."""
        steps: list[str] = []
        current = START
        while len(steps) < MAX_SESSION_STEPS:
            successors = self.transitions.get(current)
            if not successors:
                break
            symbols, weights = zip(*sorted(successors.items()))
            current = rng.choices(symbols, weights)[0]
            if current == END:
                break
            steps.append(current)
        if not steps or steps[0] != USER:
            steps.insert(0, USER)
        if steps[-1] not in TEXT_ANSWERS:
            steps.append("ASSISTANT_TEXT")
        return steps


def learn_patterns(paths: list[str | Path]) -> list[ToolPatterns]:
    """One ToolPatterns per domain found in the trajectory files, sorted by domain."""
    counts: dict[str, dict[str, Counter]] = defaultdict(lambda: defaultdict(Counter))
    for path in paths:
        with open(path, encoding="utf-8") as stream:
            for line in stream:
                if not line.strip():
                    continue
                row = json.loads(line)
                steps = [START] + list(row["steps"]) + [END]
                domain = counts[str(row.get("domain", "default"))]
                for a, b in zip(steps, steps[1:]):
                    domain[a][b] += 1
    return [ToolPatterns(d, {a: dict(c) for a, c in counts[d].items()}) for d in sorted(counts)]


def default_pattern_files() -> list[Path]:
    """The recorded tool sequences shipped beside the checkout (../shared/data)."""
    root = Path(__file__).resolve().parents[3] / "shared" / "data"
    return [p for p in (root / "bfcl_multiturn_toolseq.jsonl", root / "medagentbench_toolseq.jsonl")
            if p.exists()]


def packaged_patterns() -> list[ToolPatterns]:
    """The transition counts shipped with stepahead (derived from the public BFCL and
    MedAgentBench tool sequences; see the file's note), for machines without shared/."""
    doc = json.loads((Path(__file__).with_name("patterns.json")).read_text(encoding="utf-8"))
    return [ToolPatterns(d, doc["domains"][d]) for d in sorted(doc["domains"])]


def load_patterns(paths: list[str | Path] | None = None) -> list[ToolPatterns]:
    """Patterns learned from `paths`, or the packaged ones when none are given."""
    return learn_patterns(paths) if paths else packaged_patterns()
