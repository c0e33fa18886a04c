"""`stepahead traces show ID --follow` started before the gateway ever ran (no store file
yet) waits for the store, and then the session, to appear, as it waits for a session."""
from __future__ import annotations

import agents_trace.traces_command as traces_command
from tests.agents_trace.helpers import ManualClock, make_tracer, run_scripted_session
from tests.agents_trace.test_traces_command import _run


def test_follow_waits_for_a_store_not_made_yet_then_shows_the_session(tmp_path, capsys, monkeypatch):
    folder = tmp_path / "fresh"
    store = folder / "traces.sqlite3"
    waits = []

    def sleep(seconds: float) -> None:   # what the gateway does meanwhile
        waits.append(seconds)
        if len(waits) == 1:
            folder.mkdir()
            store.touch()   # the file is made, its tables not yet
        elif len(waits) == 2:
            clock = ManualClock()
            tracer, _ = make_tracer(folder, clock)
            run_scripted_session(tracer, clock, headers={"x-session-id": "agent-1"})
            tracer.stop()   # stored, and ended
        assert len(waits) < 10, "still waiting"

    following = traces_command.follow_session
    monkeypatch.setattr(traces_command, "follow_session",
                        lambda *args, **kwargs: following(*args, **kwargs, sleep=sleep, poll_s=0.01))
    assert _run(["traces", "show", "agent-1", "--follow", "--db", str(store)]) == 0
    out, err = capsys.readouterr()
    assert waits == [0.01, 0.01]
    assert f"waiting for session 'agent-1' (or a request of that id) and its trace store '{store}'" in err
    assert out.startswith("session agent-1") and out.rstrip().endswith("session 'agent-1' ended (shutdown)")


def test_follow_still_refuses_a_store_path_that_is_a_directory(tmp_path, capsys):
    assert _run(["traces", "show", "agent-1", "--follow", "--db", str(tmp_path)]) == 2   # a wrong path: usage
    assert "is a directory, not a trace store" in capsys.readouterr().err
