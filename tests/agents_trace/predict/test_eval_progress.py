"""`python -m agents_trace.predict.eval` draws progress bars only on a terminal's stderr,
as `stepahead workload generate` and `replay` decide it (QA221 F7: a redirected stderr got
bar redraws), and has one for the scoring phase too, not only the fit; `--frozen` with
`--no-refit` is a usage error, as frozen never refits (QA221 F8)."""
from __future__ import annotations

import io
import json

import pytest

from agents_trace.predict import eval as predict_eval


def _data(tmp_path) -> str:
    path = tmp_path / "seq.jsonl"
    path.write_text("".join(json.dumps({"id": f"s{i}", "domain": "ab"[i % 4 // 2], "steps": ["USER", "ls", "cat"]})
                            + "\n" for i in range(12)))
    return str(path)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("on_a_terminal", [False, True])
def test_bars_only_when_stderr_is_a_terminal(tmp_path, monkeypatch, capsys, on_a_terminal):
    asked = {}

    def evaluate(lines, **kwargs):
        asked.update(kwargs)
        return {"predictor": {"n": 0}}   # (then "nothing to score": exit 1, enough here)

    monkeypatch.setattr(predict_eval, "evaluate", evaluate)
    if on_a_terminal:
        monkeypatch.setattr("sys.stderr", _Terminal())
    predict_eval.main(["--data", _data(tmp_path), "--json"])
    assert asked["progress"] is on_a_terminal


def test_the_scoring_phase_has_a_bar_of_its_own(tmp_path, monkeypatch):
    bars = []

    class Bar:
        def __init__(self, iterable=None, total=None, desc="", **kwargs):
            self.items, self.total, self.desc, self.n = iterable, total, desc, 0
            self.disabled = kwargs.get("disable", False)
            bars.append(self)

        def __iter__(self):
            for item in self.items:
                yield item
                self.n += 1

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def update(self, n=1):
            self.n += n

        def close(self):
            pass

    monkeypatch.setattr(predict_eval, "tqdm", Bar)
    lines, _ = predict_eval.lines_or_exit_status(_data(tmp_path))
    predict_eval.evaluate(lines, progress=True)
    assert [(bar.desc, bar.n, bar.disabled) for bar in bars] == [("fitting tenants", 2, False), ("scoring", 6, False)]
    assert bars[1].total == 6   # the odd-indexed lines, which are scored
    bars.clear()
    predict_eval.evaluate(lines)   # a library call: no bar unless asked
    assert all(bar.disabled for bar in bars)


def test_frozen_with_no_refit_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        predict_eval.main(["--data", _data(tmp_path), "--frozen", "--no-refit"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == ("python -m agents_trace.predict.eval: error: argument --no-refit: "
                                    "not allowed with argument --frozen")
