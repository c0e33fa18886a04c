"""tests/conftest.py: a logging handler made while a test captured its output outlives the
test without printing '--- Logging error ---' in a later one. uvicorn makes such handlers at
each `uvicorn.Config` (`stepahead serve` in the test process too), torch at its first import;
the loggers keep them, and a gateway served for the session logs through them in any later
test, which then read a traceback on its stderr. The two tests run in this order, in one
process (one xdist group)."""
from __future__ import annotations

import logging
import sys

import pytest

pytestmark = pytest.mark.xdist_group("conftest_log_handlers")

PROBE = "stepahead.tests.capture_probe"


def test_a_handler_is_made_while_the_test_captures_its_output(capsys):
    logger = logging.getLogger(PROBE)
    logger.handlers.clear()
    logger.addHandler(logging.StreamHandler(sys.stderr))   # capsys's stream: closed at the test's end
    logger.propagate = False
    logger.warning("said during the test that made it")
    assert capsys.readouterr().err == "said during the test that made it\n"


def test_a_later_record_through_it_prints_no_logging_error(capsys):
    logger = logging.getLogger(PROBE)
    try:
        logger.warning("said in a later test")
        assert "Logging error" not in capsys.readouterr().err
    finally:
        logger.handlers.clear()
