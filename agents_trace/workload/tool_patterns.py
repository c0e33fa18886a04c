"""Tool-transition patterns learned from recorded agent tool sequences.

A first-order Markov chain per domain over step symbols (`USER`, tool names,
`ASSISTANT_TEXT`/`FINISH`, and a terminal `END`), fitted by counting transitions in
trajectory files of the `{"id", "domain", "steps": [...]}` form (shared/data), plus how
many user turns each recorded session had. Sampling draws a session's number of turns
from those counts, then walks the chain, continuing with the user after a text answer
until the turns are done: sessions move between tools the way the recorded agents did
and are as long as theirs (a chain alone would end after every text answer with the
same odds, whatever the turn, where BFCL's sessions mostly run 2-6 turns).
"""
from __future__ import annotations

import json
import random
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

START = "START"
END = "END"
TEXT_ANSWERS = frozenset({"ASSISTANT_TEXT", "FINISH"})
USER = "USER"
MAX_SESSION_STEPS = 60


@dataclass(frozen=True, slots=True)
class ToolPatterns:
    """Transition counts of one domain: `transitions[a]` maps next symbol -> count;
    `turn_counts[k]` is how many recorded sessions had k user turns (empty: the chain
    alone decides when a session ends)."""

    domain: str
    transitions: dict[str, dict[str, int]]
    turn_counts: dict[int, int] = field(default_factory=dict)

    @property
    def tools(self) -> list[str]:
        symbols = {s for nxt in self.transitions.values() for s in nxt} | set(self.transitions)
        return sorted(s for s in symbols if s not in TEXT_ANSWERS | {USER, START, END})

    def sample_session(self, rng: random.Random, use_turn_counts: bool = True) -> list[str]:
        """A symbol sequence from START's successor to the last symbol before END, with
        a number of user turns drawn from `turn_counts` (when known and used; else the
        chain ends the session after a text answer with its own odds)."""
        num_turns = None
        if self.turn_counts and use_turn_counts:
            counts, weights = zip(*sorted(self.turn_counts.items()))
            num_turns = rng.choices(counts, weights)[0]
        steps: list[str] = []
        current = START
        turns = 0
        while len(steps) < MAX_SESSION_STEPS:
            successors = self.transitions.get(current)
            if num_turns is not None and current in TEXT_ANSWERS:
                if turns >= num_turns:
                    break
                successors = {s: c for s, c in (successors or {}).items() if s != END} or {USER: 1}
            if not successors:
                break
            symbols, weights = zip(*sorted(successors.items()))
            current = rng.choices(symbols, weights)[0]
            if current == END:
                break
            turns += current == USER
            steps.append(current)
        if not steps or steps[0] != USER:
            steps.insert(0, USER)
        if steps[-1] not in TEXT_ANSWERS:
            steps.append("ASSISTANT_TEXT")
        return steps


class PatternFileError(ValueError):
    """A tool-sequence file cannot be read, or a line of it is not a trajectory; the
    message reads `cannot read FILE: line N: what is wrong` (no line for a file that
    cannot be opened), ready for the command line to print as it is."""


def _trajectory(line: str, line_no: int) -> tuple[str, list[str]]:
    """(domain, steps) of one `{"id", "domain", "steps": [...]}` line, `steps` a non-empty
    list of strings; ValueError naming the line when it is not one."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"line {line_no}: not JSON ({exc.msg})") from None
    if not isinstance(row, dict):
        raise ValueError(f"line {line_no}: expected a JSON object with 'steps'")
    steps = row.get("steps")
    if not isinstance(steps, list) or not all(isinstance(step, str) for step in steps):
        raise ValueError(f"line {line_no}: 'steps' must be a list of step names (strings)")
    domain = row.get("domain", "default")
    if not isinstance(domain, str):
        raise ValueError(f"line {line_no}: 'domain' must be a string")
    if not steps:   # a session of no step: learned, it would make one-request sessions
        raise ValueError(f"line {line_no}: 'steps' is empty (a recorded session has at least one step)")
    return domain, steps


def _read_trajectories(path: str | Path) -> list[tuple[str, list[str]]]:
    """Every trajectory of one file; PatternFileError naming the file (and the line)."""
    trajectories = []
    try:
        with open(path, encoding="utf-8-sig") as stream:   # a leading byte-order mark read as the traces' readers do
            for line_no, line in enumerate(stream, start=1):
                if line.strip():
                    trajectories.append(_trajectory(line, line_no))
    except OSError as exc:
        raise PatternFileError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise PatternFileError(f"cannot read {path}: not UTF-8 text ({exc.reason})") from None
    except ValueError as exc:
        raise PatternFileError(f"cannot read {path}: {exc}") from None
    return trajectories


def learn_patterns(paths: list[str | Path]) -> list[ToolPatterns]:
    """One ToolPatterns per domain found in the trajectory files, sorted by domain.
    A file that cannot be read or holds a line that is not a trajectory is a
    PatternFileError (a ValueError) naming the file and the line; nothing is learned."""
    counts: dict[str, dict[str, Counter]] = defaultdict(lambda: defaultdict(Counter))
    turns: dict[str, Counter] = defaultdict(Counter)
    for path in paths:
        for name, recorded in _read_trajectories(path):
            steps = [START] + recorded + [END]
            domain = counts[name]
            for a, b in zip(steps, steps[1:]):
                domain[a][b] += 1
            turns[name][max(1, steps.count(USER))] += 1
    return [ToolPatterns(d, {a: dict(c) for a, c in counts[d].items()}, dict(sorted(turns[d].items())))
            for d in sorted(counts)]


def default_pattern_files() -> list[Path]:
    """The recorded tool sequences shipped beside the checkout (../shared/data)."""
    root = Path(__file__).resolve().parents[3] / "shared" / "data"
    return [p for p in (root / "bfcl_multiturn_toolseq.jsonl", root / "medagentbench_toolseq.jsonl")
            if p.exists()]


def packaged_patterns() -> list[ToolPatterns]:
    """The transition counts shipped with stepahead (derived from the public BFCL and
    MedAgentBench tool sequences; see the file's note), for machines without shared/."""
    doc = json.loads((Path(__file__).with_name("patterns.json")).read_text(encoding="utf-8"))
    turns = doc.get("turns", {})
    return [ToolPatterns(d, doc["domains"][d], {int(k): n for k, n in turns.get(d, {}).items()})
            for d in sorted(doc["domains"])]


def load_patterns(paths: list[str | Path] | None = None) -> list[ToolPatterns]:
    """Patterns learned from `paths`, or the packaged ones when none are given."""
    return learn_patterns(paths) if paths else packaged_patterns()
