"""benchmarks/bench_response_archive.py: the baseline trim keeps the same rows as the
archive's own (only its cost differs); a short run reports every configuration."""
from __future__ import annotations

import itertools

from benchmarks.bench_response_archive import CONFIGS, WholeScanArchive, main, stored
from gateway.response_archive import ResponseArchive


def test_the_baseline_trim_keeps_exactly_the_rows_the_archive_keeps(tmp_path):
    kept = {}
    for cls in (WholeScanArchive, ResponseArchive):
        ticks = itertools.count()
        archive = cls(tmp_path / f"{cls.__name__}.sqlite3", 3, clock=lambda: float(next(ticks)))
        for i in range(10):
            archive.put("a" if i % 3 else "b", stored(f"r{i}"))
            if i == 7:
                assert archive.get("a", "r4") is not None   # read: most recently used again
        kept[cls] = archive.db.execute("SELECT tenant, id FROM responses ORDER BY tenant, used_s").fetchall()
        archive.close()
    assert kept[WholeScanArchive] == kept[ResponseArchive] == [
        ("a", "r7"), ("a", "r4"), ("a", "r8"), ("b", "r3"), ("b", "r6"), ("b", "r9")]


def test_a_short_run_reports_every_configuration_against_the_old_one(capsys):
    result = main(["--tenants", "2", "--capacity", "20", "--measure", "30", "--rounds", "2"])
    assert set(result["put_us_median"]) == set(CONFIGS) and result["baseline_over"]["whole_scan_random_ids"] == 1.0
    assert all(len(rounds) == 2 and min(rounds) > 0 for rounds in result["put_us_rounds"].values())
    assert '"benchmark": "response_archive"' in capsys.readouterr().out
