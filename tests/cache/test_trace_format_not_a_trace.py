"""A line that is no request (a tool sequence, a Mooncake line without its time) is refused
as what it is, not with a complaint about the value of a `t` it never had."""
from __future__ import annotations

import io
import json

import pytest

from cache.trace_format import TraceFormatError, iter_trace


def _error(row: dict) -> str:
    with pytest.raises(TraceFormatError) as error:
        list(iter_trace(io.StringIO(json.dumps(row) + "\n"))[1])
    return str(error.value)


def test_a_tool_sequence_line_is_called_one():
    message = _error({"id": "x", "domain": "bfcl", "steps": ["USER", "ls", "FINISH"]})
    assert message.startswith("line 1: not a request trace: a tool-sequence line")
    assert "must be a non-negative number" not in message


def test_a_mooncake_line_without_timestamp_names_timestamp_not_t():
    message = _error({"input_length": 100, "output_length": 5, "hash_ids": [1]})
    assert message == "line 1: a Mooncake line without 'timestamp' (its arrival, in milliseconds)"


def test_a_line_with_no_time_at_all_names_both_formats_fields():
    message = _error({"tenant": "a", "input_tokens": 3, "output_tokens": 1})
    assert "no 't'" in message and "'timestamp'" in message and "must be a non-negative" not in message


def test_a_bad_t_value_keeps_its_own_message():
    assert _error({"t": None, "input_tokens": 3, "output_tokens": 1}) == \
        "line 1: 't' must be a non-negative number of seconds"


def test_sim_policies_all_stands_alone():
    import argparse

    import pytest

    from cache.sim.cli import _policies
    from cache.sim.replay import POLICY_NAMES

    assert _policies("all") == POLICY_NAMES
    with pytest.raises(argparse.ArgumentTypeError, match="'all' .* stands alone"):
        _policies("all,lru")
