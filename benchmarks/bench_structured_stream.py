"""Streamed structured replies: read as the model writes them, or whole once it is done.

Starts `stepahead serve` (SmolLM2 by default, `--model tiny` for the test model; one
worker) and sends the same streamed `response_format` json_schema requests two ways,
alternating, greedy so both see the same model text:

- `checked` (the contender, what the gateway does): the model's free try is read against
  the schema as it streams; what is sure goes out at once; where the model strays, the
  object is completed leaf by leaf from there;
- `whole` (the baseline, the gateway before session 35): the free try is taken whole, kept
  when it validates, else the object is built leaf by leaf from nothing. The baseline is
  the same gateway given the same schema plus `"minProperties": 0`, a constraint every
  object meets but which the streaming reader does not decide, so the gateway takes the
  whole-reply path for it.

With `--tools` each request also offers a tool (`search_web`), as the OpenAI Agents SDK
does for an agent with tools and an output type: the model may call it instead, and the
reply is decided as it streams (`gateway.json_or_calls`); before session 37 such a reply
was always sent whole.

With `--typed` the tasks' schemas carry what pydantic writes for bounded and typed fields
(number bounds, string lengths, date, time, date-time, email and IPv4 formats), steered as
they stream since session 37 (before, such schemas took the whole-reply path).

Prints one JSON line: per way, medians of the time to the first delta (content or tool
call) and to the last, completion tokens, the share of replies that validate (a call's
arguments must be a JSON object) and that are calls; and the ratios whole ÷ checked.
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
from jsonschema import Draft202012Validator

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.script_args import benchmark_parser  # noqa: E402
from cache.cli_args import positive_int  # noqa: E402
from benchmarks.bench_servers import free_port, gateway_state_env, spawn, stop_all, wait_ready  # noqa: E402

API_KEY = "sk-bench-structured"
TASKS = [
    ("Report the weather in Paris as JSON: the city, the temperature in celsius and a one-sentence summary.",
     {"type": "object", "additionalProperties": False, "required": ["city", "celsius", "summary"],
      "properties": {"city": {"type": "string"}, "celsius": {"type": "number"}, "summary": {"type": "string"}}}),
    ("Extract the contact as JSON: Ada Lovelace, ada@example.org, works at Analytical Engines Ltd in London.",
     {"type": "object", "additionalProperties": False, "required": ["name", "email", "company"],
      "properties": {"name": {"type": "string"}, "email": {"type": "string"},
                     "company": {"type": "object", "required": ["name", "city"], "additionalProperties": False,
                                 "properties": {"name": {"type": "string"}, "city": {"type": "string"}}}}}),
    ("List three things to pack for a weekend hike, as JSON, with the trip's difficulty.",
     {"type": "object", "additionalProperties": False, "required": ["items", "difficulty"],
      "properties": {"items": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 5},
                     "difficulty": {"enum": ["easy", "moderate", "hard"]}}}),
    ("Plan a team meeting as JSON: a title, how many minutes, whether it is remote, and an optional note.",
     {"type": "object", "additionalProperties": False, "required": ["title", "minutes", "remote", "note"],
      "properties": {"title": {"type": "string"}, "minutes": {"type": "integer"}, "remote": {"type": "boolean"},
                     "note": {"anyOf": [{"type": "string"}, {"type": "null"}]}}}),
]


# `--typed`: what pydantic writes for Field(ge=, le=, gt=, multiple_of=, min_length=, max_length=)
# and for date, time, date-time, email and IPv4 fields (steered as they stream since session 37)
TYPED_TASKS = [
    ("Review the restaurant 'Chez Nous' in Paris as JSON: a title, stars from 1 to 5, and the price of a meal.",
     {"type": "object", "additionalProperties": False, "required": ["title", "stars", "price_eur"],
      "properties": {"title": {"type": "string", "minLength": 3, "maxLength": 40},
                     "stars": {"type": "integer", "minimum": 1, "maximum": 5},
                     "price_eur": {"type": "number", "exclusiveMinimum": 0, "multipleOf": 0.5}}}),
    ("Schedule a team sync on 2025-03-03 at 10:00 for 5 people, as JSON.",
     {"type": "object", "additionalProperties": False, "required": ["title", "day", "starts_at", "attendees"],
      "properties": {"title": {"type": "string"}, "day": {"type": "string", "format": "date"},
                     "starts_at": {"type": "string", "format": "time"},
                     "attendees": {"type": "integer", "minimum": 1, "maximum": 20}}}),
    ("Register a new user as JSON: a username of 3 to 12 characters, an email address, and an age.",
     {"type": "object", "additionalProperties": False, "required": ["username", "email", "age"],
      "properties": {"username": {"type": "string", "minLength": 3, "maxLength": 12},
                     "email": {"type": "string", "format": "email"},
                     "age": {"type": "integer", "minimum": 13, "maximum": 120}}}),
    ("Log a server incident as JSON: the host's IPv4 address, when it started, and a severity from 1 to 3.",
     {"type": "object", "additionalProperties": False, "required": ["host", "started", "severity"],
      "properties": {"host": {"type": "string", "format": "ipv4"}, "started": {"type": "string", "format": "date-time"},
                     "severity": {"type": "integer", "minimum": 1, "maximum": 3}}}),
]

SEARCH_TOOL = {"type": "function", "function": {
    "name": "search_web", "description": "Search the web for current information.",
    "parameters": {"type": "object", "required": ["query"], "properties": {"query": {"type": "string"}}}}}


def whole_schema(schema: dict) -> dict:
    """`schema` with a constraint every object meets that the streaming reader does not
    decide: the gateway then takes its whole-reply path (the baseline)."""
    return {**schema, "minProperties": 0}


def one_reply(client: httpx.Client, model: str, prompt: str, schema: dict, max_tokens: int,
              tools: bool = False) -> dict:
    body = {"model": model, "stream": True, "max_tokens": max_tokens, "temperature": 0,
            "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": prompt}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "reply", "schema": schema}}}
    if tools:
        body["tools"] = [SEARCH_TOOL]
    started_s = time.perf_counter()
    first_s, pieces, usage, arguments = None, [], {}, []
    with client.stream("POST", "/chat/completions", json=body) as response:
        if response.status_code != 200:
            raise RuntimeError(f"HTTP {response.status_code}: {response.read()[:300]!r}")
        for line in response.iter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            usage = chunk.get("usage") or usage
            for choice in chunk.get("choices", []):
                calls = choice["delta"].get("tool_calls") or []
                if choice["delta"].get("content") or calls:
                    first_s = first_s if first_s is not None else time.perf_counter() - started_s
                if choice["delta"].get("content"):
                    pieces.append(choice["delta"]["content"])
                arguments += [call["function"].get("arguments") or "" for call in calls]
    text = "".join(pieces)
    try:
        value = json.loads("".join(arguments) if arguments else text)
        is_valid = isinstance(value, dict) if arguments else validator(schema).is_valid(value)
    except json.JSONDecodeError:
        is_valid = False
    return {"first_s": first_s, "last_s": time.perf_counter() - started_s,
            "num_deltas": len(pieces) + len(arguments), "completion_tokens": usage.get("completion_tokens", 0),
            "is_valid": is_valid, "is_call": bool(arguments), "text": text or "".join(arguments)}


def validator(schema: dict) -> Draft202012Validator:
    """The schema's validator, checking the formats jsonschema can check here too."""
    return Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)


def measure(base_url: str, api_key: str, model: str, rounds: int, max_tokens: int, tools: bool = False,
            tasks: list = TASKS) -> dict:
    """Every task `rounds` times each way (alternating, the order swapped every round)."""
    runs: dict[str, list[dict]] = {"checked": [], "whole": []}
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {api_key}"}, timeout=300) as client:
        for prompt, schema in tasks:   # warm-up: the prompts' prefixes cached for both ways
            one_reply(client, model, prompt, schema, 4, tools)
        for index in range(rounds):
            for prompt, schema in tasks:
                ways = ["checked", "whole"] if index % 2 == 0 else ["whole", "checked"]
                for way in ways:
                    sent = schema if way == "checked" else whole_schema(schema)
                    run = one_reply(client, model, prompt, sent, max_tokens, tools)
                    run["is_valid"] = run["is_valid"] and (
                        run["is_call"] or validator(schema).is_valid(json.loads(run["text"])))
                    runs[way].append(run)
    summary = {way: {"first_delta_s_p50": statistics.median(r["first_s"] for r in got),
                     "last_delta_s_p50": statistics.median(r["last_s"] for r in got),
                     "deltas_p50": statistics.median(r["num_deltas"] for r in got),
                     "completion_tokens_p50": statistics.median(r["completion_tokens"] for r in got),
                     "valid_share": sum(r["is_valid"] for r in got) / len(got),
                     "call_share": sum(r["is_call"] for r in got) / len(got), "num_replies": len(got)}
               for way, got in runs.items()}
    checked, whole = summary["checked"], summary["whole"]
    summary["first_delta_ratio"] = whole["first_delta_s_p50"] / max(checked["first_delta_s_p50"], 1e-9)
    summary["last_delta_ratio"] = whole["last_delta_s_p50"] / max(checked["last_delta_s_p50"], 1e-9)
    summary["completion_tokens_ratio"] = whole["completion_tokens_p50"] / max(checked["completion_tokens_p50"], 1)
    summary["examples"] = {way: got[0]["text"] for way, got in runs.items()}
    return summary


def main() -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--model", default="smollm2", help="'smollm2' (default) or 'tiny'")
    parser.add_argument("--rounds", type=positive_int, default=3, help="times each task is sent each way")
    parser.add_argument("--max-tokens", type=positive_int, default=160, help="tokens each reply generates at most")
    parser.add_argument("--tools", action="store_true", help="offer a tool with each request")
    parser.add_argument("--typed", action="store_true", help="tasks with bounds, lengths and typed formats")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench-structured-"))
    env = dict(os.environ, PYTHONPATH=str(ROOT), STEPAHEAD_DEMO_KEY=API_KEY, **gateway_state_env(workdir))
    port = free_port()
    process = spawn([sys.executable, "-m", "gateway.cli", "serve", "--model", args.model, "--workers", "1",
                     "--port", str(port), "--log-level", "error"], env, workdir / "gateway.log")
    try:
        base_url = f"http://127.0.0.1:{port}"
        wait_ready(f"{base_url}/health", process, timeout_s=300, log_path=workdir / "gateway.log")
        while httpx.get(f"{base_url}/health").json()["models"][args.model]["ready"] is not True:
            time.sleep(0.5)
        result = measure(f"{base_url}/v1", API_KEY, args.model, args.rounds, args.max_tokens, args.tools,
                         TYPED_TASKS if args.typed else TASKS)
    finally:
        stop_all([process], workdir)
    print(json.dumps({"benchmark": "structured_stream", "model": args.model, "tools": args.tools,
                      "typed": args.typed, "rounds": args.rounds,
                      "max_tokens": args.max_tokens, **result}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
