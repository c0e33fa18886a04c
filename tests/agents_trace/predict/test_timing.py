"""The timing CLI runs end to end on a small file."""
from __future__ import annotations

import json

from agents_trace.predict import timing

from .synthetic import agent_sessions


def test_timing_main_reports_refit_and_forecast(tmp_path, capsys) -> None:
    data = tmp_path / "seq.jsonl"
    data.write_text("".join(json.dumps({"id": i, "domain": "d", "steps": s}) + "\n"
                            for i, s in enumerate(agent_sessions(12))))
    assert timing.main(["--data", str(data), "--sessions", "40", "--repeats", "1"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["sessions"] == 40
    assert 0.0 < result["refit_s_min"] <= result["refit_s_median"]
    assert 0.0 < result["forecast_us_p50"] <= result["forecast_us_p99"]
