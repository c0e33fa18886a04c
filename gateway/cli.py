"""The `stepahead` command line: `main()` dispatches to subcommands.

Each subcommand is a module with `register(subparsers)`, which adds its parser and sets
`handler` (a function of the parsed args returning an exit code). To add one (`replay`,
`traces export`, `workload generate`), write its module and list its `register` in
`commands()`; nothing else changes.

`main()` reading the process's own command line (the `stepahead` command, `python -m
gateway.cli`) tells the command it is the process's last step (`args.exits_after`: `serve`
then keeps SIGHUP ignored through the exit); `main([...])`, in a process that goes on (a
test, an embedder), does not. There `serve` also ignores SIGHUP from `main`'s first step
(`hangups_ignored_until_serve`): its default action would end the gateway during the
imports below, before `serve` counts SIGHUP (gateway/reload.py `HangupsBeforeStart`); a
SIGHUP then comes before `serve` reads its config file, so no reload is owed for it. Any
other command keeps SIGHUP's default action (`stepahead traces list` in a closed terminal
ends), and so does a process that goes on.

The subcommands' modules are imported inside `main`, not when this module is: a Ctrl+C
during those imports (over a second on a cold start) then stops the command like one
later on, with "stepahead: stopped" and exit status 130, not a traceback.
"""
from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Callable

from cache.stdout_reader import run_command


def commands() -> tuple[Callable[[argparse._SubParsersAction], None], ...]:
    """Every subcommand's `register`, in the order `--help` lists them."""
    from agents_trace import traces_command
    from agents_trace.replay import cli as replay_command
    from agents_trace.workload import cli as workload_command
    from gateway import config_check, keys_command, serve_command

    return (serve_command.register, config_check.register, keys_command.register, traces_command.register,
            replay_command.register, workload_command.register)


def build_parser() -> argparse.ArgumentParser:
    from gateway.version import installed_version

    parser = argparse.ArgumentParser(
        prog="stepahead",
        description="OpenAI-compatible inference gateway for AI agents.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {installed_version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for register in commands():
        register(subparsers)
    return parser


def command_parser(parser: argparse.ArgumentParser, tokens: list[str],
                   unknown: list[str] = ()) -> argparse.ArgumentParser:
    """The parser of the innermost (sub)command `tokens` name (`serve`, `traces list`)
    before the first of the `unknown` arguments: the one whose part of the command line
    holds it (`stepahead --bogus serve`: the top level's, not serve's; QA221 F8)."""
    unknown = set(unknown)
    for token in tokens:
        commands = next((action.choices for action in parser._actions
                         if isinstance(action, argparse._SubParsersAction)), {})
        if token in commands:
            parser = commands[token]
        elif token in unknown:
            break
    return parser


def hangups_ignored_until_serve(argv: list[str] | None) -> None:
    """SIGHUP ignored when the process's own command line (`argv` None) is `serve` (its
    first word that is no option: the top level's take no value), until `serve` puts its
    own handler in (gateway/serve_command.py); nothing for any other command or `argv`."""
    if argv is None and next((word for word in sys.argv[1:] if not word.startswith("-")), None) == "serve":
        try:
            signal.signal(signal.SIGHUP, signal.SIG_IGN)
        except (ValueError, AttributeError, OSError):   # not the main thread, no SIGHUP here
            pass


def main(argv: list[str] | None = None) -> int:
    """The command's exit status: a Ctrl+C (one the command does not stop on by itself, which
    says more and returns) or a reader of stdout that leaves (`stepahead ... | head`) end it
    with no traceback (`run_command`)."""
    hangups_ignored_until_serve(argv)   # first: the imports below take a second or more
    return run_command(lambda: _run(argv))


def _run(argv: list[str] | None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:   # in the words of parse_args, under the (sub)command's usage, not the top level's
        command_parser(parser, sys.argv[1:] if argv is None else argv, unknown).error(
            f"unrecognized arguments: {' '.join(unknown)}")
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return 2
    args.exits_after = argv is None   # the process's own command line: the command is its last step
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
