"""Workers import our packages from where they are installed: a `cache.py` in the
directory the gateway starts from is never imported by the fork server or its workers."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
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


def test_a_thread_leaving_never_takes_the_variable_from_one_still_inside(monkeypatch):
    """FI23's note: the fork-server watch starts processes from a thread of its own; two
    threads inside at once made the first to leave remove the variable while the other
    still started an interpreter, and the other then put it back for good."""
    monkeypatch.delenv(SAFE_PATH, raising=False)
    a_inside, b_inside, a_left = threading.Event(), threading.Event(), threading.Event()
    seen_by_b = []

    def b() -> None:
        a_inside.wait(10)
        with no_working_directory_imports():
            b_inside.set()
            a_left.wait(10)
            seen_by_b.append(os.environ.get(SAFE_PATH))

    thread = threading.Thread(target=b)
    thread.start()
    with no_working_directory_imports():
        a_inside.set()
        b_inside.wait(0.5)   # B waits for A to leave; before, it came in at once
    a_left.set()
    thread.join(10)
    assert seen_by_b == ["1"] and SAFE_PATH not in os.environ
