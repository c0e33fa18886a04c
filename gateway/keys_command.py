"""`stepahead hash-key`: the sha256 digest to put in a tenant's `api_key_sha256`.

Reads the key from stdin (so it stays out of shell history and process lists) or, with
`--generate`, makes a new random key and prints both it and its digest.
"""
from __future__ import annotations

import argparse
import secrets
import sys

from gateway.config import key_digest


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("hash-key", help="print the sha256 digest of an API key")
    parser.add_argument("--generate", action="store_true", help="make a new random key")
    parser.set_defaults(handler=hash_key)


def hash_key(args: argparse.Namespace) -> int:
    if args.generate:
        api_key = f"sk-{secrets.token_urlsafe(24)}"
        print(f"key:    {api_key}")
        print(f"sha256: {key_digest(api_key)}")
        return 0
    api_key = sys.stdin.readline().strip()
    if not api_key:
        print("stepahead: give the key on stdin", file=sys.stderr)
        return 2
    print(key_digest(api_key))
    return 0
