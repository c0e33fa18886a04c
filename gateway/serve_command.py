"""`stepahead serve`: run the gateway under uvicorn.

With no `--config`, serves the embedded default model on two local workers for one demo
tenant, and prints the base URL and the demo key (from $STEPAHEAD_DEMO_KEY, or a fresh
random one). Command-line `--host`/`--port` win over the file's [server] table.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import secrets
import sys

from gateway.config import ConfigError, default_config, load_config


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("serve", help="run the OpenAI-compatible HTTP gateway")
    parser.add_argument("--config", help="TOML config file (models, tenants, limits, tracing)")
    parser.add_argument("--host", help="bind address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port (default 8000)")
    parser.add_argument("--log-level", default="info",
                        choices=("critical", "error", "warning", "info", "debug"))
    parser.set_defaults(handler=serve)


def serve(args: argparse.Namespace) -> int:
    import uvicorn

    from gateway.app import build_app

    demo_key = None
    try:
        if args.config:
            config = load_config(args.config)
        else:
            demo_key = os.environ.get("STEPAHEAD_DEMO_KEY") or f"sk-demo-{secrets.token_urlsafe(18)}"
            config = default_config(demo_key)
    except (ConfigError, OSError) as exc:
        print(f"stepahead: bad config: {exc}", file=sys.stderr)
        return 2
    overrides = {k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None}
    config = dataclasses.replace(config, **overrides)
    print(f"stepahead: serving on http://{config.host}:{config.port}/v1", flush=True)
    if demo_key is not None:
        print(f"stepahead: demo tenant API key: {demo_key}", flush=True)
    uvicorn.run(build_app(config), host=config.host, port=config.port, log_level=args.log_level)
    return 0
