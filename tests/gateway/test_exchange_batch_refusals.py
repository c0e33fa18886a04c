"""QA124 defect 2: a Batch API line's refusal that the batch runner sends again is no
refusal the tenant saw: it counts in no `stepahead_rejected_total` (an operator reading it
would think the tenant's agents were turned away); a final one, the line's result, counts."""
from types import SimpleNamespace

import pytest

from gateway.config import LimitsConfig
from gateway.errors import ApiError
from gateway.exchange import admit
from gateway.batch_line_turn import BATCH_LINE, BatchLineTurn
from gateway.limits import TenantLimiter


class Rejections:
    def __init__(self) -> None:
        self.codes: list[tuple[str, str]] = []

    def record_rejection(self, tenant: str, code: str) -> None:
        self.codes.append((tenant, code))


async def _refused(state, num_tokens: int, *, as_batch_line: bool) -> ApiError:
    marked = BATCH_LINE.set(BatchLineTurn() if as_batch_line else None)
    try:
        with pytest.raises(ApiError) as refused:
            await admit(state, "t", num_tokens)
    finally:
        BATCH_LINE.reset(marked)
    return refused.value


async def test_only_the_refusals_a_client_sees_count():
    limiter = TenantLimiter("t", LimitsConfig(max_concurrent=1, tokens_per_minute=100), queue_timeout_s=0.02)
    state = SimpleNamespace(limiters={"t": limiter}, metrics=Rejections())
    running = await admit(state, "t", 10)
    waited = await _refused(state, 10, as_batch_line=True)   # no slot came: sent again by the runner
    assert waited.code == "rate_limit_exceeded" and state.metrics.codes == []
    too_large = await _refused(state, 500, as_batch_line=True)   # past the tokens per minute: its result
    assert too_large.headers["x-should-retry"] == "false" and state.metrics.codes == [("t", "rate_limit_exceeded")]
    await _refused(state, 10, as_batch_line=False)   # an agent's request: no queue place (max_queued 0)
    assert state.metrics.codes == [("t", "rate_limit_exceeded")] * 2
    limiter.release(running, 10)


def test_an_early_refusal_of_a_batch_line_is_counted_as_acquire_counts_it():
    """The route's early refusal (requests per minute, before the prompt is rendered) goes
    through the same rule as `admit`'s."""
    from gateway.exchange import record_refusal

    limiter = TenantLimiter("t", LimitsConfig(requests_per_minute=1))
    state = SimpleNamespace(limiters={"t": limiter}, metrics=Rejections())
    limiter._requests.level = 0   # the minute's request spent
    refused = limiter.early_refusal(10)
    assert refused is not None and refused.headers["Retry-After"]
    marked = BATCH_LINE.set(BatchLineTurn())
    try:
        record_refusal(state, "t", refused)   # the runner sends it again after Retry-After
    finally:
        BATCH_LINE.reset(marked)
    assert state.metrics.codes == []
    record_refusal(state, "t", refused)   # an agent's
    assert state.metrics.codes == [("t", "rate_limit_exceeded")]
