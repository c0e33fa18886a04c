"""The `stepahead` command line: `main()` dispatches to subcommands.

Each subcommand is a module with `register(subparsers)`, which adds its parser and sets
`handler` (a function of the parsed args returning an exit code). To add one (`replay`,
`traces export`, `workload generate`), write its module and list its `register` in
`COMMANDS`; nothing else changes.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from agents_trace import traces_command
from agents_trace.replay import cli as replay_command
from agents_trace.workload import cli as workload_command

from gateway import keys_command, serve_command

COMMANDS: tuple[Callable[[argparse._SubParsersAction], None], ...] = (
    serve_command.register,
    keys_command.register,
    traces_command.register,
    replay_command.register,
    workload_command.register,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="stepahead",
        description="OpenAI-compatible inference gateway for AI agents.")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for register in COMMANDS:
        register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return 2
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
