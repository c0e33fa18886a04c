"""`stepahead hash-key` with a terminal on stdin asks for the key at a hidden prompt,
"API key to hash: " on stderr (`getpass`: not echoed, not left in the scrollback; QA221 F6);
a piped stdin is read as before, with no prompt."""
from __future__ import annotations

import getpass
import io
import sys

from gateway.cli import main
from gateway.config import key_digest


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True

    def readline(self, *args) -> str:
        raise AssertionError("a terminal's key is read by getpass, without echo")


def _prompt_answers(monkeypatch, answer: str | BaseException) -> list[tuple[str, object]]:
    asked = []

    def fake_getpass(prompt: str = "Password: ", stream=None) -> str:
        asked.append((prompt, stream))
        if isinstance(answer, BaseException):
            raise answer
        return answer

    monkeypatch.setattr(getpass, "getpass", fake_getpass)
    return asked


def test_a_terminal_gets_a_hidden_prompt_on_stderr(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", _Terminal())
    asked = _prompt_answers(monkeypatch, "  sk-typed \n")
    assert main(["hash-key"]) == 0
    assert asked == [("API key to hash: ", sys.stderr)]
    assert capsys.readouterr().out == key_digest("sk-typed") + "\n"


def test_end_of_input_at_the_prompt_is_one_line_and_status_2(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", _Terminal())
    _prompt_answers(monkeypatch, EOFError())
    assert main(["hash-key"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and "give the key" in captured.err


def test_a_piped_key_gets_no_prompt(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.StringIO("sk-piped\n"))
    asked = _prompt_answers(monkeypatch, "never")
    assert main(["hash-key"]) == 0
    assert asked == [] and capsys.readouterr() == (key_digest("sk-piped") + "\n", "")


def test_ctrl_c_at_the_prompt_ends_the_prompts_line_first(monkeypatch, capsys):
    """QA223 F5: "API key to hash: stepahead: stopped" came out on one line."""
    monkeypatch.setattr(sys, "stdin", _Terminal())
    _prompt_answers(monkeypatch, KeyboardInterrupt())
    assert main(["hash-key"]) == 130
    assert capsys.readouterr().err == "\nstepahead: stopped\n"   # (the prompt itself is getpass's, faked here)
