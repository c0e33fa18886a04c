"""The modules under benchmarks/ that are no benchmark say so when run as a script (QA:
`python benchmarks/cpu_probe.py` printed nothing and exited 0, as if it had measured)."""
from __future__ import annotations

import runpy
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
HELPER_MODULES = ("cpu_probe", "e2e_runs", "e2e_saved_run", "model_oracle", "policy_sources", "script_args")


@pytest.mark.parametrize("module", HELPER_MODULES)
def test_a_helper_module_run_as_a_script_is_refused_naming_the_benchmarks_that_use_it(capsys, module):
    """As e2e_capacity.py is: one `error:` line and exit status 2 (QA221 F8: these gave
    status 1 without the `error:` prefix)."""
    with pytest.raises(SystemExit) as exit_:
        runpy.run_path(str(BENCHMARKS / f"{module}.py"), run_name="__main__")
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: {module}.py is a helper module, not a benchmark")
    assert "bench_" in err   # which script to run instead


def test_every_module_under_benchmarks_is_a_script_or_says_it_is_none():
    for path in sorted(BENCHMARKS.glob("*.py")):
        text = path.read_text()
        assert 'if __name__ == "__main__":' in text, f"{path.name} does nothing when run"
