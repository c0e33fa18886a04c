"""What the gateway's own checks cost per agent request, before any model work.

For agent-shaped chat bodies (N tool schemas, M messages) it times, in one process and
run, each step the completion endpoints take on every request: JSON parsing, the
nesting-depth bound, pydantic validation, and the cross-field checks with the tools'
JSON Schemas checked against their metaschema every time (the baseline, as before
session 13) or remembered per tenant (`SchemaChecker`, the contender). Prints one JSON
line per body shape, medians of `--repeats` rounds, with `checks_speedup` = baseline
÷ contender.

    python benchmarks/bench_request_checks.py [--repeats 7] [--rounds 200]
"""
from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.script_args import benchmark_parser  # noqa: E402
from jsonschema.validators import validator_for  # noqa: E402

from cache.cli_args import positive_int  # noqa: E402
from agents_trace.json_text import json_depth  # noqa: E402
from gateway.chat_checks import check_chat_request  # noqa: E402
from gateway.schema_checks import SchemaChecker  # noqa: E402
from gateway.schemas import ChatCompletionRequest, validate  # noqa: E402


class CheckEveryTime(SchemaChecker):
    """The baseline: every schema checked against its metaschema on every request."""

    def check(self, tenant: str, schema: dict) -> None:
        validator_for(schema).check_schema(schema)


def agent_body(num_tools: int, num_turns: int) -> dict:
    tools = [{"type": "function", "function": {
        "name": f"tool_{i}", "description": f"tool number {i}",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string", "description": "what to look up"},
            "limit": {"type": "integer", "minimum": 1},
            "filters": {"type": "array", "items": {"type": "string", "enum": ["a", "b", "c"]}}},
            "required": ["query"]}}} for i in range(num_tools)]
    messages = [{"role": "system", "content": "You are an agent. " * 40},
                {"role": "user", "content": "Find and summarise. " * 10}]
    for turn in range(num_turns):
        call_id = f"call_{turn}"
        messages += [{"role": "assistant", "content": None, "tool_calls": [{
            "id": call_id, "type": "function",
            "function": {"name": f"tool_{turn % max(num_tools, 1)}", "arguments": '{"query": "x", "limit": 3}'}}]},
            {"role": "tool", "tool_call_id": call_id, "content": "result text " * 150}]
    return {"model": "m", "messages": messages, "tools": tools} if num_tools else {"model": "m", "messages": messages}


def per_request_s(step, rounds: int, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        for _ in range(rounds):
            step()
        times.append((time.perf_counter() - started) / rounds)
    return statistics.median(times)


def main() -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--repeats", type=positive_int, default=7,
                        help="timed runs of each way; the figures are their medians")
    parser.add_argument("--rounds", type=positive_int, default=200, help="requests checked per timed run")
    args = parser.parse_args()
    for num_tools, num_turns in ((0, 5), (5, 5), (10, 15), (20, 40)):
        body = agent_body(num_tools, num_turns)
        raw = json.dumps(body).encode()
        parsed = validate(ChatCompletionRequest, body)
        remembered, every_time = SchemaChecker(), CheckEveryTime()
        check_chat_request(parsed, "acme", remembered)  # first sight: checked and remembered
        timings = {
            "parse_s": per_request_s(lambda: json.loads(raw), args.rounds, args.repeats),
            "depth_bound_s": per_request_s(lambda: json_depth(body), args.rounds, args.repeats),
            "validate_s": per_request_s(lambda: validate(ChatCompletionRequest, body), args.rounds, args.repeats),
            "checks_every_time_s": per_request_s(lambda: check_chat_request(parsed, "acme", every_time),
                                                 max(args.rounds // 10, 5), args.repeats),
            "checks_remembered_s": per_request_s(lambda: check_chat_request(parsed, "acme", remembered),
                                                 args.rounds, args.repeats),
        }
        print(json.dumps({"tools": num_tools, "messages": len(body["messages"]), "body_bytes": len(raw),
                          **{k: round(v * 1e6, 1) for k, v in ((k.removesuffix("_s") + "_us", v)
                                                               for k, v in timings.items())},
                          "checks_speedup": round(timings["checks_every_time_s"] / timings["checks_remembered_s"], 1)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
