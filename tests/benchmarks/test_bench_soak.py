"""benchmarks/bench_soak.py: its config, its memory readings and its slope (the soak
itself starts gateways; it is run by hand, see docs/benchmarks.md)."""
from __future__ import annotations

import os
import subprocess
import sys

from benchmarks.bench_soak import KEYS, descendants, rss_mib, slope_per_1000, vocabulary, write_config
from gateway.config import key_digest, load_config


def test_slope_per_1000_sessions_known_answers():
    assert slope_per_1000([(0, 100.0), (1000, 112.0), (2000, 124.0)]) == 12.0
    assert slope_per_1000([(500, 7.0), (1500, 7.0)]) == 0.0
    assert slope_per_1000([(500, 7.0)]) is None


def test_vocabulary_repeats_words_and_is_fixed_by_its_seed():
    words = vocabulary(0)
    assert words == vocabulary(0) != vocabulary(1)
    assert 1000 < len(words) <= 3000 and all(w.isalpha() and w.islower() for w in words)


def test_soak_config_is_a_valid_gateway_config(tmp_path):
    path = tmp_path / "soak.toml"
    write_config(path, "tiny", 8123, tracing=False, idle_timeout_s=3.0, store=tmp_path / "t.sqlite3")
    config = load_config(path)
    assert config.port == 8123 and not config.tracing.enabled
    assert config.tracing.session_idle_timeout_s == 3.0
    assert [t.key_digests for t in config.tenants] == [(key_digest(k),) for k in KEYS]


def test_memory_of_a_process_and_its_children_is_read_from_proc():
    child = subprocess.Popen([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(30)"],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "up\n"   # the interpreter is loaded, not just exec'd
        assert child.pid in descendants(os.getpid())
        assert rss_mib(child.pid) > 1.0 and rss_mib(os.getpid()) > rss_mib(child.pid)
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
    assert rss_mib(child.pid) == 0.0
