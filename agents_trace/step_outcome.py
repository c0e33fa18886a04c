"""Whether a finished step was a response at all (`generated_nothing`): the one rule the
session table, the step numbering, the spans and the tracer share."""
from __future__ import annotations

from typing import Any


def generated_nothing(outcome: Any) -> bool:
    """Whether a finished step (a `Step` or a `StepResult`: its `error`,
    `num_output_tokens`, `tool_calls` and `other_choices`) failed without generating
    anything: refused (an unknown model, its checks, its tenant's limits, a prompt over
    the context), failed before a first token, or left by its client while it queued.
    Such a step is no response: it ends no tool run, starts none, and its retry is the
    step that follows the tools. The rule of an export's left-out steps (no output
    token), but a call the client was sent counts as output (a later request may answer it)."""
    return (outcome.error is not None and outcome.num_output_tokens == 0 and not outcome.tool_calls
            and not any(choice.tool_calls for choice in outcome.other_choices))
