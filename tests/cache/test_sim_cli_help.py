"""`python -m cache.sim --help` says what each flag is and its default (QA221 F4: `--policy`
and `--measure-from-frac` gave no default, and the three calibration flags said only
"default: the calibration's", not what they are)."""
from __future__ import annotations

import re

from cache.sim.cli import build_parser


def _help_of(flag: str) -> str:
    text = " ".join(build_parser().format_help().split())
    return re.split(r" --[a-z-]+ [A-Z_]+ ", text.split(f" {flag} {flag.lstrip('-').upper().replace('-', '_')} ")[-1])[0]


def test_policy_and_measure_from_frac_give_their_defaults():
    assert "(default: lru)" in _help_of("--policy")
    assert "(default 0" in _help_of("--measure-from-frac")


def test_the_calibration_flags_say_what_they_are():
    assert "seconds of prefill per prompt token" in _help_of("--prefill-s-per-token")
    assert "seconds every request costs" in _help_of("--request-overhead-s")
    assert "bytes of KV cache per token" in _help_of("--kv-bytes-per-token")
    for flag in ("--prefill-s-per-token", "--request-overhead-s", "--kv-bytes-per-token"):
        assert "(default: the --calibration's)" in _help_of(flag)
