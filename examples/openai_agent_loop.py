"""A tool-using agent loop with the official OpenAI SDK, pointed at stepahead.

The model asks for tools; this script runs them locally and sends the results back, step
after step, until the model answers in text (or --max-steps). Every step re-sends the
whole conversation, and stepahead serves the repeated prefix from its KV cache: the
`cached` column shows how many prompt tokens of each step were not recomputed.

    stepahead serve                       # prints the base URL and a demo key
    python examples/openai_agent_loop.py --api-key sk-... "What's the weather in Paris?"

The first step uses tool_choice="required" (the agent must consult a tool), later steps
"auto" (the model decides whether to call another tool or answer).
"""
from __future__ import annotations

import argparse
import json
import time
import uuid

import openai
from _errors import MAX_RETRIES, report
from openai import OpenAI

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather for a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "add", "description": "Add two numbers.",
        "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                       "required": ["a", "b"]}}},
]


def run_tool(name: str, arguments: str) -> str:
    """The agent's local tools. Bad arguments come back as an error text, as agents do."""
    try:
        args = json.loads(arguments or "{}")
    except json.JSONDecodeError as exc:
        return json.dumps({"error": f"arguments are not JSON: {exc}"})
    if name == "get_weather":
        time.sleep(0.2)  # a tool takes time; the gateway sees it as the gap between steps
        return json.dumps({"city": args.get("city"), "forecast": "sunny", "celsius": 21})
    if name == "add":
        try:
            return json.dumps({"sum": float(args.get("a", 0)) + float(args.get("b", 0))})
        except (TypeError, ValueError):
            return json.dumps({"error": "a and b must be numbers"})
    return json.dumps({"error": f"unknown tool {name}"})


def agent(client: OpenAI, model: str, question: str, max_steps: int, session: str) -> list[dict]:
    messages = [{"role": "system", "content": "You are a helpful assistant. Use the tools."},
                {"role": "user", "content": question}]
    steps = []
    for step in range(max_steps):
        reply = client.chat.completions.create(
            model=model, messages=messages, tools=TOOLS, max_tokens=64, temperature=0.0,
            tool_choice="required" if step == 0 else "auto",
            extra_headers={"x-session-id": session})
        message = reply.choices[0].message
        usage = reply.usage
        cached = usage.prompt_tokens_details.cached_tokens if usage.prompt_tokens_details else 0
        calls = message.tool_calls or []
        steps.append({"step": step, "prompt_tokens": usage.prompt_tokens, "cached": cached,
                      "tool_calls": [c.function.name for c in calls]})
        messages.append(message.model_dump(exclude_none=True))
        if not calls:
            print(f"answer: {message.content}")
            break
        for call in calls:
            messages.append({"role": "tool", "tool_call_id": call.id,
                             "content": run_tool(call.function.name, call.function.arguments)})
    return steps


def main() -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("question", nargs="?", default="What's the weather in Paris, and what is 2 + 3?")
    parser.add_argument("--base-url", default="http://127.0.0.1:8000/v1")
    parser.add_argument("--api-key", required=True)
    parser.add_argument("--model", default=None, help="default: the gateway's first model")
    parser.add_argument("--max-steps", type=int, default=4)
    args = parser.parse_args()
    client = OpenAI(base_url=args.base_url, api_key=args.api_key, max_retries=MAX_RETRIES)
    try:
        model = args.model or client.models.list().data[0].id
        steps = agent(client, model, args.question, args.max_steps, f"example-{uuid.uuid4().hex[:8]}")
    except openai.APIError as exc:   # a wrong key, an unknown model, no gateway: one line, exit 1
        return report(exc, args.base_url)
    print(f"{'step':>4} {'prompt':>7} {'cached':>7}  tool calls")
    for s in steps:
        print(f"{s['step']:>4} {s['prompt_tokens']:>7} {s['cached']:>7}  {', '.join(s['tool_calls']) or '-'}")
    print(json.dumps({"steps": steps}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
