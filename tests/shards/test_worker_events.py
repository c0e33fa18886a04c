"""The operator's lines for a worker lost or back (known answers)."""
import signal

from shards.supervisor import START_TIMEOUT_REASON, UNRESPONSIVE_REASON
from shards.worker_events import (exit_reason, fence_words, fork_server_down_line, probe_reason, worker_back_line,
                                  worker_down_line, workers_starting_line)


def test_exit_reason_names_the_signal_or_the_status():
    assert exit_reason(-signal.SIGKILL) == "killed by SIGKILL"
    assert exit_reason(-signal.SIGSEGV) == "killed by SIGSEGV"
    assert exit_reason(-200) == "killed by signal 200"   # no such signal: its number
    assert exit_reason(1) == "exited with status 1"
    assert exit_reason(0) == "exited"
    assert exit_reason(None) == "closed its pipe"


def test_an_exit_whose_fork_server_was_gone_is_of_unknown_status_not_255():
    """multiprocessing says 255 for every worker of a fork server that is gone (QA95)."""
    assert exit_reason(255, fork_server_gone=True) == "exited (status unknown: its fork server was gone)"
    assert exit_reason(255) == "exited with status 255"   # its server alive: a real 255
    assert exit_reason(-signal.SIGKILL, fork_server_gone=True) == "killed by SIGKILL"   # passed on before it went
    assert fork_server_down_line(4321, exit_reason(-signal.SIGKILL)) == (
        "the workers' fork server (pid 4321) killed by SIGKILL; the workers serve on; starting a new one now "
        "(a worker that stops before it has imported torch restarts only once it has)")


def test_fence_words_say_the_worker_was_killed_and_after_how_long_unresponsive():
    assert fence_words(UNRESPONSIVE_REASON, 30.0) == "unresponsive for 30 s, killed"
    assert fence_words(UNRESPONSIVE_REASON, 1.5) == "unresponsive for 1.5 s, killed"
    assert fence_words(START_TIMEOUT_REASON, 30.0) == "did not start in time, killed"
    assert fence_words("killed by SIGKILL", 30.0) == "killed by SIGKILL"


def test_the_down_line_says_what_became_of_the_requests_and_when_it_restarts():
    assert worker_down_line("w0", "killed by SIGKILL", num_failed=2, num_retried=1, restart_in_s=0.2,
                            while_starting=False, num_serving=1) == (
        "worker w0 killed by SIGKILL: 2 request(s) it was running failed, 1 not yet answered went to "
        "another worker; restarting it in 0.2 s")
    assert worker_down_line("w1", "exited with status 1", num_failed=0, num_retried=0, restart_in_s=0.8,
                            while_starting=True, num_serving=1) == (
        "worker w1 exited with status 1 while starting; restarting it in 0.8 s")
    assert worker_down_line("w1", fence_words(START_TIMEOUT_REASON, 1.0), num_failed=0, num_retried=0,
                            restart_in_s=1.6, while_starting=True, num_serving=1) == (
        "worker w1 did not start in time, killed; restarting it in 1.6 s")
    assert worker_down_line("w0", "killed by SIGKILL", num_failed=1, num_retried=0, restart_in_s=0.2,
                            while_starting=False, num_serving=1, num_resumed=2) == (
        "worker w0 killed by SIGKILL: 1 request(s) it was running failed, 2 request(s) cut mid-reply go on "
        "from their last token on another worker; restarting it in 0.2 s")


def test_the_back_line_counts_restarts_and_the_time_down():
    assert worker_back_line("w0", 3, 1.234) == "worker w0 serves again (restart 3, 1.2 s after it stopped)"


def test_the_starting_line_says_when_the_workers_time_themselves_too():
    assert workers_starting_line(2, probe=None) == "starting 2 worker(s): loading the model"
    assert workers_starting_line(1, probe=probe_reason(reuse=True, local=True, stored=False)) == (
        "starting 1 worker(s): loading the model, then timing each one's prefill and decode (no timing of "
        "this machine with these settings from the last 24 h)")


def test_the_starting_line_says_why_the_workers_time_themselves():
    assert probe_reason(reuse=True, local=True, stored=True) is None
    assert probe_reason(reuse=False, local=True, stored=True) == "reuse_probed_costs = false"   # whatever is stored
    assert probe_reason(reuse=False, local=True, stored=False) == "reuse_probed_costs = false"
    assert probe_reason(reuse=True, local=False, stored=False) == "timings are kept for local workers only"


def test_the_down_line_says_another_worker_only_when_one_serves():
    """QA199 F9: with no other worker serving (one worker, or all down), the requests wait
    for one to serve again, and the line says so."""
    for num_serving, retried, resumed in ((0, "wait for a worker to serve again", "when a worker serves again"),
                                          (2, "went to another worker", "on another worker")):
        assert worker_down_line("w0", "killed by SIGKILL", num_failed=0, num_retried=1, restart_in_s=0.2,
                                while_starting=False, num_serving=num_serving, num_resumed=2) == (
            f"worker w0 killed by SIGKILL: 1 not yet answered {retried}, 2 request(s) cut mid-reply go on from "
            f"their last token {resumed}; restarting it in 0.2 s")


def test_the_engine_tells_the_down_line_whether_another_worker_serves():
    """A one-worker engine's killed worker: its cut stream goes on when a worker serves again;
    beside a live worker, on another worker (fake channels: tests/shards/test_engine_fences_waiting.py)."""
    from tests.shards.test_engine_fences_waiting import _add, _engine, _stream, _submit

    for workers, words in ((("w0",), "when a worker serves again"), (("w0", "w1"), "on another worker")):
        engine = _engine(health_timeout_s=5.0)
        t0 = engine.t0
        _add(engine, "w0", t0)
        _submit(engine, "r1", t0)   # on w0, the only worker yet
        _stream(engine, "r1", "w0", t0)
        for worker_id in workers[1:]:
            _add(engine, worker_id, t0)
        engine._channels["w0"].alive = False
        engine._on_exit("w0", 0, "killed by SIGKILL")
        _, lines = engine._supervise_tick(t0 + 1)
        assert lines == [f"worker w0 killed by SIGKILL: 1 request(s) cut mid-reply go on from their last token "
                         f"{words}; restarting it in 0.2 s"]
