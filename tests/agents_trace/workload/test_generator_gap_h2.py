"""The generator writes each later step's drawn tool run or think time as `gap_s`: the
step arrives its modelled reply time (0.02 s an output token) plus that gap after the
step before, so a replay that waits `gap_s` after the live reply leaves the modelled one out."""
from __future__ import annotations

import collections
import io

import pytest

from agents_trace.workload.generator import WorkloadConfig, generate_workload
from agents_trace.workload.tool_patterns import packaged_patterns
from cache.trace_format import TraceHeader, iter_trace, write_trace

MODELLED_REPLY_S_PER_TOKEN = 0.02


def _sessions(records):
    sessions = collections.defaultdict(list)
    for record in records:
        sessions[(record.tenant, record.session)].append(record)
    return sessions.values()


@pytest.mark.parametrize("seed", [0, 7])
def test_each_later_step_carries_its_gap_and_arrives_reply_time_plus_gap_after_the_one_before(seed):
    records = generate_workload(WorkloadConfig(num_tenants=2, num_sessions=5, seed=seed), packaged_patterns())
    sessions = list(_sessions(records))
    assert sum(len(steps) > 1 for steps in sessions) >= 3
    for steps in sessions:
        assert steps[0].gap_s is None and steps[0].after == "start"
        for previous, step in zip(steps, steps[1:]):
            assert step.gap_s is not None and step.gap_s > 0
            assert step.t - previous.t == pytest.approx(
                MODELLED_REPLY_S_PER_TOKEN * previous.output_tokens + step.gap_s, abs=1e-9)
            assert step.gap_s < step.t - previous.t   # the modelled reply time is not in it


def test_batch_lines_carry_no_gap_and_gap_s_survives_the_written_trace():
    config = WorkloadConfig(num_tenants=1, num_sessions=3, seed=2, batch_lines_per_s=0.5)
    records = generate_workload(config, packaged_patterns())
    assert all(r.gap_s is None for r in records if r.service_tier == "flex")
    stream = io.StringIO()
    write_trace(stream, records, TraceHeader(block_size=config.block_size))
    _, read = iter_trace(io.StringIO(stream.getvalue()))
    assert [r.gap_s for r in read] == [None if r.gap_s is None else round(r.gap_s, 6) for r in records]
    assert any(r.gap_s is not None for r in records)
