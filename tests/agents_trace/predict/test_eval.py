"""The evaluation CLI: output shape and a predictor that beats the baselines."""
from __future__ import annotations

import json
import random

from agents_trace.predict import eval as predict_eval


def write_dataset(path, num_lines: int = 80) -> None:
    """Two tenants whose next step depends on the last two steps (a bigram cannot see
    that), so the predictor's higher-order evidence must win."""
    rng = random.Random(0)
    with open(path, "w") as f:
        for i in range(num_lines):
            tenant = "alpha" if i % 3 else "beta"
            steps = []
            for _ in range(rng.randint(1, 3)):
                first = rng.choice(["ls", "cat"])
                steps += ["USER", first, "grep", "wc" if first == "ls" else "sort",
                          "ASSISTANT_TEXT"]
            f.write(json.dumps({"id": f"s{i}", "domain": tenant, "steps": steps}) + "\n")


def test_eval_main_prints_one_json_line(tmp_path, capsys) -> None:
    data = tmp_path / "seq.jsonl"
    write_dataset(data)
    assert predict_eval.main(["--data", str(data), "--json"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1
    result = json.loads(lines[0])
    assert set(result) == {"predictor", "bigram", "unigram", "fit_s_per_tenant",
                           "forecast_us_p50", "forecast_us_p99"}
    for name in ("predictor", "bigram", "unigram"):
        assert set(result[name]) == {"top1", "top3", "logloss", "n"}
        assert result[name]["n"] == result["predictor"]["n"] > 0
    assert result["predictor"]["logloss"] < 0.95 * result["bigram"]["logloss"]
    assert result["predictor"]["top1"] >= result["bigram"]["top1"]


def test_eval_frozen_table_output(tmp_path, capsys) -> None:
    data = tmp_path / "seq.jsonl"
    write_dataset(data, num_lines=40)
    assert predict_eval.main(["--data", str(data), "--frozen"]) == 0
    out = capsys.readouterr().out
    assert "predictor" in out and "bigram" in out and "forecast" in out
