"""Small deterministic agent sessions for the predictor tests."""
from __future__ import annotations

import random


def agent_sessions(num_sessions: int, seed: int = 0, tools: tuple[str, ...] = (
        "search", "read", "write")) -> list[list[str]]:
    """Each turn: USER, `search`, one or two `read`, sometimes `write`, a text answer;
    one to three turns per session (END is left to the caller / predictor)."""
    rng = random.Random(seed)
    search, read, write = tools
    sessions = []
    for _ in range(num_sessions):
        steps: list[str] = []
        for _ in range(rng.randint(1, 3)):
            steps += ["USER", search, read]
            if rng.random() < 0.5:
                steps.append(read)
            if rng.random() < 0.3:
                steps.append(write)
            steps.append("ASSISTANT_TEXT")
        sessions.append(steps)
    return sessions


def batched_sessions(num_batches: int, batch_size: int) -> list[list[str]]:
    """Runs of identical single-tool sessions: a tenant that works in batches."""
    kinds = [["USER", "get_a", "FINISH"], ["USER", "get_b", "FINISH"],
             ["USER", "get_c", "post_c", "FINISH"]]
    out = []
    for b in range(num_batches):
        out += [list(kinds[b % len(kinds)]) for _ in range(batch_size)]
    return out
