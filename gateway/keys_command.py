"""`stepahead hash-key`: the sha256 digest to put in a tenant's `api_key_sha256`.

Reads the key from stdin (so it stays out of shell history and process lists), after a
hidden prompt ("API key to hash: " on stderr, no echo: `getpass`) when stdin is a terminal,
so a typed key is neither shown nor left in the scrollback (QA221 F6); or, with
`--generate`, makes a new random key and prints both it and its digest. With `--tenant
NAME`, stdout is a `[[tenants]]` table to append to the config (the key, if generated,
goes to stderr), which SIGHUP then loads into a running gateway:

    stepahead hash-key --generate --tenant team-a >> gw.toml && kill -HUP <gateway pid>
"""
from __future__ import annotations

import argparse
import getpass
import secrets
import sys
import unicodedata
from typing import TextIO

from gateway.config import key_digest, tenant_name_problem

KEY_PROMPT = "API key to hash: "
TOML_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "hash-key", help="print the sha256 digest of an API key",
        description="Print the sha256 digest of the API key read from stdin, for a tenant's api_key_sha256: "
                    '`echo -n "$KEY" | stepahead hash-key` (on stdin, the key stays out of shell history and '
                    "process lists; whitespace around it is no part of it; on a terminal, a prompt that does not "
                    "echo it). With --generate, a new random "
                    "key and its digest instead.")
    parser.add_argument("--generate", action="store_true", help="make a new random key (stdin is not read)")
    parser.add_argument("--tenant", metavar="NAME",
                        help="print a [[tenants]] table for NAME with the digest (a generated key goes to stderr)")
    parser.set_defaults(handler=hash_key)


def hash_key(args: argparse.Namespace) -> int:
    problem = None if args.tenant is None else tenant_name_problem(args.tenant)
    if problem:   # as the config would refuse the table: tenants[N].name ...
        print(f"stepahead: --tenant: a tenant's name {problem}", file=sys.stderr)
        return 2
    if args.generate:
        api_key = f"sk-{secrets.token_urlsafe(24)}"
        if args.tenant is None:
            print(f"key:    {api_key}")
            print(f"sha256: {key_digest(api_key)}")
            return 0
        print(f"stepahead: the key for tenant {args.tenant!r}: {api_key}", file=sys.stderr)
    else:
        try:
            api_key = read_key_from_terminal() if _is_terminal(sys.stdin) else read_key(sys.stdin)
        except ValueError as exc:
            print(f"stepahead: {exc}", file=sys.stderr)
            return 2
        if api_key is None:
            print("stepahead: the key on stdin is not UTF-8 text: give the key itself, as clients send it",
                  file=sys.stderr)
            return 2
        if not api_key:
            print('stepahead: give the key on stdin: echo -n "$KEY" | stepahead hash-key', file=sys.stderr)
            return 2
        if args.tenant is None:
            print(key_digest(api_key))
            return 0
    print(tenant_table(args.tenant, key_digest(api_key)), end="")
    return 0


def _is_terminal(stream: TextIO | None) -> bool:
    try:
        return stream is not None and stream.isatty()
    except (AttributeError, ValueError):   # none, or closed
        return False


def read_key_from_terminal() -> str | None:
    """The key typed at a hidden prompt (KEY_PROMPT on stderr, no echo), without the
    whitespace around it; "" at end of input (Ctrl+D); None when it is not UTF-8 text."""
    try:
        api_key = getpass.getpass(KEY_PROMPT, stream=sys.stderr).strip()
        api_key.encode()
    except EOFError:
        return ""
    except UnicodeError:
        return None
    except KeyboardInterrupt:   # Ctrl+C at the prompt: "stepahead: stopped" on a line of its own
        print(file=sys.stderr)
        raise
    return api_key


def read_key(stdin: TextIO) -> str | None:
    """The key on `stdin`'s first line, without the whitespace around it; None when its
    bytes are not UTF-8 (decoding failed, or left surrogate escapes that have no digest).
    Raises ValueError when a piped stdin holds more text after that line (a file of
    several keys: one digest of its first line would be taken for all); a terminal's
    stdin is read one line, as typed."""
    try:
        api_key = stdin.readline().strip()
        api_key.encode()
        more = "" if stdin.isatty() else stdin.read()
    except UnicodeError:
        return None
    if more.strip():
        raise ValueError("stdin holds more than one line: give one key (echo -n \"$KEY\" | stepahead hash-key)")
    return api_key


def tenant_table(name: str, digest: str) -> str:
    """A `[[tenants]]` TOML table for `name` (one `tenant_name_problem` passes) with one
    key digest; the name quoted as TOML needs (`toml_string`)."""
    return f"\n[[tenants]]\nname = {toml_string(name)}\napi_key_sha256 = [\"{digest}\"]\n"


def toml_string(text: str) -> str:
    """`text` as a TOML basic string: a quote, a backslash, every control character (which
    TOML forbids raw: U+0000-U+001F, U+007F; and the C1 ones) and every invisible format
    character (bidirectional overrides, zero-width ones: a name must read as it is) escaped;
    all else as it is."""
    def escaped(char: str) -> str:
        if char in TOML_SHORT_ESCAPES:
            return TOML_SHORT_ESCAPES[char]
        if unicodedata.category(char) in ("Cc", "Cf"):
            return f"\\u{ord(char):04x}" if ord(char) <= 0xFFFF else f"\\U{ord(char):08x}"
        return char

    return '"' + "".join(map(escaped, text)) + '"'
