"""The writer's event queue: batches for one transaction, never holds a flush back."""
import threading
import time

from agents_trace.records import SessionEnded
from agents_trace.writer import EventQueue, WriterStats, _Flush


def _ended(number: int) -> SessionEnded:
    return SessionEnded("alpha", f"s{number}", 1, None, "idle")


def test_take_lingers_after_a_trace_event_so_later_ones_join_its_batch():
    events = EventQueue(100, WriterStats())
    events.offer(_ended(0))
    later = threading.Timer(0.02, lambda: [events.offer(_ended(n)) for n in (1, 2, 3)])
    later.start()
    batch = events.take(timeout_s=1.0, linger_s=0.5)
    later.join()
    assert [e.session for e in batch] == ["s0", "s1", "s2", "s3"]
    events.offer(_ended(4))
    threading.Timer(0.05, lambda: events.offer(_ended(5))).start()
    assert [e.session for e in events.take(timeout_s=1.0)] == ["s4"]   # no linger asked
    assert [e.session for e in events.take(timeout_s=1.0)] == ["s5"]


def test_a_flush_is_taken_at_once_without_lingering():
    events = EventQueue(100, WriterStats())
    marker = _Flush(threading.Event())
    events.put_control(marker, timeout_s=1.0)
    began_s = time.monotonic()
    assert events.take(timeout_s=1.0, linger_s=5.0) == [marker]
    assert time.monotonic() - began_s < 1.0
    assert events.take(timeout_s=0.01, linger_s=5.0) == []   # nothing queued: no wait past the timeout
