"""Workers import our packages from where they are installed: a `cache.py` in the
directory the gateway starts from is never imported by the fork server or its workers."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from shards.safe_imports import SAFE_PATH, no_working_directory_imports

FORK_A_WORKER_IMPORT = """
import importlib
from shards.local_transport import fork_server_context, start_fork_server
if __name__ == "__main__":   # the fork server imports this module too (its preload's __main__)
    start_fork_server()
    child = fork_server_context().Process(target=importlib.import_module, args=("cache.policies",))
    child.start()
    child.join(120)
    print("exit", child.exitcode)
"""


def test_a_module_named_like_ours_in_the_working_directory_is_not_imported_by_workers(tmp_path):
    (tmp_path / "cache.py").write_text("raise SystemExit('the working directory was imported')\n")
    script = tmp_path / "bin" / "gateway_like.py"   # run as a console script is: its own folder on the path
    script.parent.mkdir()
    script.write_text(FORK_A_WORKER_IMPORT)
    tree = str(Path(__file__).resolve().parents[2])   # the code under test, wherever this checkout is
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": tree})
    assert done.returncode == 0 and done.stdout.split() == ["exit", "0"], (done.stdout, done.stderr[-2000:])
    assert "the working directory was imported" not in done.stderr


def test_the_variable_is_set_only_inside_and_restored_as_it_was(monkeypatch):
    monkeypatch.delenv(SAFE_PATH, raising=False)
    with no_working_directory_imports():
        assert os.environ[SAFE_PATH] == "1"
    assert SAFE_PATH not in os.environ
    monkeypatch.setenv(SAFE_PATH, "yes")
    with no_working_directory_imports():
        assert os.environ[SAFE_PATH] == "1"
    assert os.environ[SAFE_PATH] == "yes"
