"""A line on stderr is one write with its newline (print makes two: another thread's
line could land between them, QA145)."""
from __future__ import annotations

import io

from gateway.stderr_line import stderr_line


class Writes(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[str] = []

    def write(self, text: str) -> int:
        self.writes.append(text)
        return super().write(text)


def test_a_line_is_one_write_with_its_newline(monkeypatch):
    stderr = Writes()
    monkeypatch.setattr("sys.stderr", stderr)
    stderr_line("stepahead: forecasts: resumed 4 tenant(s)")
    assert stderr.writes == ["stepahead: forecasts: resumed 4 tenant(s)\n"]
