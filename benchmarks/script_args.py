"""The argument parser every benchmark script under benchmarks/ starts from.

Invariant: each flag of a script's `--help` says what it is (its own help text, with its
unit where it has one) and its default: the formatter appends `(default: X)` to every
flag that has a default to show, unless the text already names its default. A flag whose
default is None or a switch (store_true) shows none: its text says what happens without it.
Bad values are refused by the types of `cache.cli_args` (one argparse line, exit status 2).
"""
from __future__ import annotations

import argparse
import sys


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, plus `(default: X)` after a flag's help where the text does not
    already give its default; a list default shows comma-separated, as the flag takes it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (not action.option_strings or "default" in text.lower() or default is None
                or isinstance(default, bool) or default is argparse.SUPPRESS):
            return text
        shown = ",".join(map(str, default)) if isinstance(default, (tuple, list)) else str(default)
        return f"{text} (default: {shown.replace('%', '%%')})"


def benchmark_parser(doc: str, **options) -> argparse.ArgumentParser:
    """The parser of a benchmark script whose module docstring is `doc`: its first paragraph
    is the description, and every flag's help gets its default."""
    options.setdefault("description", doc.split("\n\n")[0])
    return argparse.ArgumentParser(formatter_class=DefaultsHelpFormatter, **options)


if __name__ == "__main__":
    print("error: script_args.py is a helper module, not a benchmark: every benchmark script builds its "
          "flags with it; run one of those (python benchmarks/bench_e2e.py --help)", file=sys.stderr)
    sys.exit(2)
