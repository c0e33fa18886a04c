"""`stepahead traces export` and `traces delete`: one session (SESSION, as `show` takes it,
or --session) or every session the filters take (--all), written as stepahead-trace/1 or
deleted with its steps and content (traces_command.py registers them)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tqdm import tqdm

from agents_trace.export import ExportCounts, export_lines, export_sessions_lines
from agents_trace.store_delete import StoreBusy, delete_sessions
from agents_trace.store_queries import matching_session_keys
from agents_trace.text_table import counted
from agents_trace.traces_lookup import CommandError, the_session
from agents_trace.traces_output import refuse_the_store, write_lines
from agents_trace.traces_runs import run_command, run_on_session, session_filter


def _one_session_or_all(args: argparse.Namespace) -> bool:
    """Whether the command names what it acts on, said on stderr when not: a session (as
    `show` takes it, positional, or --session: QA216 F5) or --all, one of them;
    `args.session` is then the session named."""
    given = [name for name, value in (("SESSION", args.session_id), ("--session", args.session),
                                      ("--all", args.all)) if value]
    if len(given) == 1:
        args.session = args.session or args.session_id
        return True
    print("stepahead: name one session (SESSION or --session SESSION) or --all"
          + (f", not {' and '.join(given)}" if given else ""), file=sys.stderr)
    return False


def export_command(args: argparse.Namespace) -> int:
    if not _one_session_or_all(args):
        return 2
    if args.all:
        return run_command(args, lambda path: _export_matching(path, args))
    if _filters_without_all(args):
        return 2
    return run_on_session(args, lambda path, session: _export_one(path, session, args.output))


def _say_failed_steps_left_out(counts: ExportCounts) -> None:
    if counts.num_failed_left_out:
        print(f"stepahead: {counts.num_failed_left_out} failed step(s) left out (refused, nothing generated: "
              "the trace format has no field for an error)", file=sys.stderr)


def _filters_without_all(args: argparse.Namespace) -> bool:
    """Whether session filters were given with --session (they select for --all only),
    said on stderr."""
    if args.all or not (args.agent or args.since or args.until or args.errors):
        return False
    print("stepahead: --agent, --since, --until and --errors select sessions for --all; "
          "with --session, name the tenant only", file=sys.stderr)
    return True


def _export_one(path: Path, session: dict, output: str | None) -> int:
    refuse_the_store(output, path)
    counts = ExportCounts()
    write_lines(export_lines(path, session["tenant"], session["session"], counts), output)
    _say_failed_steps_left_out(counts)
    return 0


def _written(counts: ExportCounts) -> str:
    """The sessions an export holds lines of (not one whose every step was refused)."""
    return f"{counted(counts.num_sessions_written, 'session')} of {len(counts.tenants_written)} tenant(s)"


def _export_matching(path: Path, args: argparse.Namespace) -> int:
    refuse_the_store(args.output, path)
    keys = matching_session_keys(path, session_filter(args))
    if not keys:
        raise CommandError(f"no sessions in {path} match", 1)
    with tqdm(total=len(keys), unit="session", desc="reading", file=sys.stderr, disable=None) as bar:
        counts = ExportCounts()
        lines = export_sessions_lines(path, keys, lambda done: f"stepahead: {_written(done)} from {path.name}",
                                      on_session=lambda: bar.update(1), counts=counts)
        num_lines = write_lines(lines, args.output)
    _say_failed_steps_left_out(counts)
    print(f"stepahead: {counted(num_lines - 1, 'request')} of {_written(counts)}"
          + (f" written to {args.output}" if args.output and args.output != "-" else ""), file=sys.stderr)
    return 0


def delete_command(args: argparse.Namespace) -> int:
    def body(path: Path) -> int:
        if args.all:
            keys = matching_session_keys(path, session_filter(args))
            if not keys:
                raise CommandError(f"no sessions in {path} match", 1)
        else:
            session = the_session(path, args.session, args.tenant)
            keys = [(session["tenant"], session["session"])]
        what = (f"session {keys[0][1]!r} of tenant {keys[0][0]!r}" if len(keys) == 1 else
                f"{len(keys)} sessions of {len({tenant for tenant, _ in keys})} tenant(s)")
        if not args.yes and not _confirmed(f"delete {what} from {path}, with their steps and content?"):
            raise CommandError("nothing deleted (pass --yes to delete without asking)", 2)
        done = [0, 0]   # whole sessions, steps deleted so far
        try:
            num_steps = delete_sessions(path, keys, after_each=lambda *totals: done.__setitem__(slice(None), totals))
        except (StoreBusy, KeyboardInterrupt) as exc:
            so_far = f"deleted {done[0]} of {counted(len(keys), 'session')} ({counted(done[1], 'step')})"
            if isinstance(exc, KeyboardInterrupt):
                print(f"stepahead: {so_far} before the stop; the rest are whole", file=sys.stderr)
                raise
            raise CommandError(f"the trace store {path} {exc}; {so_far}; try again once it is free", 2) from None
        print(f"stepahead: deleted {what} ({counted(num_steps, 'step')})", file=sys.stderr)
        return 0
    return 2 if not _one_session_or_all(args) or _filters_without_all(args) else run_command(args, body)


def _confirmed(question: str) -> bool:
    """A "y" typed on a terminal; False without one (a script must say --yes), and for
    Ctrl+D (the end of input: a "no", ending the prompt's line)."""
    if not sys.stdin.isatty():
        return False
    try:
        answer = input(f"stepahead: {question} [y/N] ")
    except EOFError:
        print(file=sys.stderr)
        return False
    return answer.strip().lower() in ("y", "yes")
