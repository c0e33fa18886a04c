"""Every knob of the workload generator, each checked against its range when the config is
made (limits.py), so a generator never starts on a workload no machine could hold.

Invariant: a WorkloadConfig that exists is one the generator can run; a refused knob's
ValueError names its command-line flag (workload/cli.py names the flags so).
"""
from __future__ import annotations

from dataclasses import dataclass

from agents_trace.workload.limits import (MAX_BATCH_LINES_PER_S, MAX_DURATION_S, MAX_SESSION_RATE_PER_S,
                                          MAX_SESSIONS, MAX_SIGMA, MAX_TOKENS, MIN_SESSION_RATE_PER_S)


@dataclass(frozen=True, slots=True)
class WorkloadConfig:
    """Every knob of the generator; the defaults give a workload where KV memory is short."""

    num_tenants: int = 4
    num_sessions: int = 40  # per tenant
    seed: int = 0
    tool_seed: int | None = None  # fixes each tool's median duration; None: `seed`
    block_size: int = 16
    session_rate_per_s: float = 0.5  # arrivals of new sessions, all tenants together
    system_prompt_tokens: tuple[int, int] = (300, 900)  # per tenant, uniform range
    tool_schema_tokens_per_tool: int = 60
    user_turn_tokens: tuple[int, int] = (20, 120)
    tool_result_tokens_median: float = 150.0
    tool_result_tokens_sigma: float = 0.8
    tool_call_output_tokens: tuple[int, int] = (15, 40)
    text_answer_output_tokens: tuple[int, int] = (40, 160)
    tool_median_s_range: tuple[float, float] = (0.5, 30.0)  # each tool's median duration
    tool_sigma: float = 0.6
    think_time_median_s: float = 20.0
    think_time_sigma: float = 0.7
    max_context_tokens: int = 8000
    recorded_turns: bool = True  # sessions as many user turns long as recorded ones; False: the chain's odds
    batch_lines_per_s: float = 0.0  # flex Batch API lines (no session), all tenants together; 0: none
    batch_prompt_tokens: int = 2048
    batch_output_tokens: int = 64

    def __post_init__(self) -> None:
        """Refuse knobs no workload can have, and knobs past the ranges of limits.py (a
        machine could not hold the workload, or a number would not be finite), naming
        the flag (ValueError)."""
        token_counts = ("block_size", "tool_schema_tokens_per_tool", "max_context_tokens", "batch_prompt_tokens",
                        "batch_output_tokens")
        for name in ("seed", "tool_seed"):   # Python's random seeds with |seed|: -N would repeat N (QA202 F3)
            if (getattr(self, name) or 0) < 0:
                raise ValueError(f"--{_flag(name)} must be 0 or more, not {getattr(self, name)}")
        for name in ("num_tenants", "num_sessions", *token_counts):
            least = 0 if name == "tool_schema_tokens_per_tool" else 1   # 0: a tenant without tool schemas
            if getattr(self, name) < least:
                raise ValueError(f"--{_flag(name)} must be at least {least}, not {getattr(self, name)}")
        for name in token_counts:
            _at_most(name, getattr(self, name), MAX_TOKENS, " tokens")
        if self.num_tenants * self.num_sessions > MAX_SESSIONS:
            raise ValueError(f"--tenants times --sessions must be at most {MAX_SESSIONS:,}, not "
                             f"{self.num_tenants * self.num_sessions:,}")
        for name, high, unit in (("session_rate_per_s", MAX_SESSION_RATE_PER_S, " a second"),
                                 ("tool_result_tokens_median", MAX_TOKENS, " tokens"),
                                 ("think_time_median_s", MAX_DURATION_S, " s")):
            if not getattr(self, name) > 0:
                raise ValueError(f"--{_flag(name)} must be positive, not {getattr(self, name)}")
            _at_most(name, getattr(self, name), high, unit)
        if self.session_rate_per_s < MIN_SESSION_RATE_PER_S:
            raise ValueError(f"--session-rate-per-s must be at least {MIN_SESSION_RATE_PER_S:g} (a session every "
                             f"{1 / MIN_SESSION_RATE_PER_S / 86400:.1f} days), not {self.session_rate_per_s}")
        for name, high in (("tool_result_tokens_sigma", MAX_SIGMA), ("tool_sigma", MAX_SIGMA),
                           ("think_time_sigma", MAX_SIGMA), ("batch_lines_per_s", MAX_BATCH_LINES_PER_S)):
            if not getattr(self, name) >= 0:
                raise ValueError(f"--{_flag(name)} must be a number, 0 or more, not {getattr(self, name)}")
            _at_most(name, getattr(self, name), high, "")
        for name, high, unit in (("system_prompt_tokens", MAX_TOKENS, " tokens"),
                                 ("user_turn_tokens", MAX_TOKENS, " tokens"),
                                 ("tool_call_output_tokens", MAX_TOKENS, " tokens"),
                                 ("text_answer_output_tokens", MAX_TOKENS, " tokens"),
                                 ("tool_median_s_range", MAX_DURATION_S, " s")):
            low, high_value = getattr(self, name)
            if not 0 < low <= high_value <= high:
                raise ValueError(f"--{_flag(name)} takes LOW HIGH with 0 < LOW <= HIGH <= {_number(high)}{unit}, "
                                 f"not {low} {high_value}")
        if self.batch_lines_per_s and self.batch_prompt_tokens + self.batch_output_tokens > self.max_context_tokens:
            raise ValueError(f"--batch-prompt-tokens plus --batch-output-tokens must fit --max-context-tokens "
                             f"({self.max_context_tokens}), not {self.batch_prompt_tokens + self.batch_output_tokens}")


def _at_most(name: str, value: float, high: float, unit: str) -> None:
    """ValueError naming the flag of WorkloadConfig field `name` when `value` passes `high` (inf does)."""
    if value > high:
        raise ValueError(f"--{_flag(name)} must be at most {_number(high)}{unit}, not {value}")


def _number(value: float) -> str:
    """1,000,000 for a whole number, else as %g."""
    return f"{value:,.0f}" if value == int(value) else f"{value:g}"


def _flag(field_name: str) -> str:
    """The command-line flag of a WorkloadConfig field (workload/cli.py names them so)."""
    return {"num_tenants": "tenants", "num_sessions": "sessions"}.get(field_name, field_name).replace("_", "-")
