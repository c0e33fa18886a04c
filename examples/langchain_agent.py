"""LangChain's ChatOpenAI pointed at stepahead: a tool-calling loop with bound tools,
then a structured report (`with_structured_output`: OpenAI's `response_format`
json_schema, which a local model answers with JSON valid against the schema).

    stepahead serve
    python examples/langchain_agent.py --api-key sk-... "What's the weather in Paris?"

The same gateway, the same prefix cache: LangChain sends the OpenAI chat protocol, so
each step of the tool loop after the first finds the conversation's head in the KV cache.
The report step sends no tools, and a local model's chat template writes the tool list
into the system turn: its prompt differs almost from the start, and little of it is found
cached (`stepahead traces show` says how much).
"""
from __future__ import annotations

import argparse
import json
import uuid

import openai
from _errors import MAX_RETRIES, report
from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from openai import OpenAI
from pydantic import BaseModel, Field


@tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return json.dumps({"city": city, "forecast": "sunny", "celsius": 21})


@tool
def add(a: float, b: float) -> str:
    """Add two numbers."""
    return json.dumps({"sum": a + b})


TOOLS = {t.name: t for t in (get_weather, add)}


class Report(BaseModel):
    """What the agent found, as a program would read it."""

    city: str = Field(description="the city asked about")
    forecast: str = Field(description="one word: sunny, rainy, ...")
    celsius: float


def run(args: argparse.Namespace) -> int:
    lookup = OpenAI(base_url=args.base_url, api_key=args.api_key, max_retries=MAX_RETRIES)
    model = args.model or lookup.models.list().data[0].id
    llm = ChatOpenAI(model=model, base_url=args.base_url, api_key=args.api_key, temperature=0,
                     max_tokens=64, max_retries=MAX_RETRIES,
                     default_headers={"x-session-id": f"langchain-{uuid.uuid4().hex[:8]}",
                                      "x-agent-name": "weather"})   # LangChain sends no agent name of its own
    messages = [SystemMessage("You are a helpful assistant. Use the tools."), HumanMessage(args.question)]
    rows = []
    for step in range(args.max_steps):
        bound = llm.bind_tools(list(TOOLS.values()), tool_choice="required" if step == 0 else "auto")
        reply = bound.invoke(messages)
        messages.append(reply)
        details = (reply.usage_metadata or {}).get("input_token_details") or {}
        rows.append({"step": step, "tool_calls": [c["name"] for c in reply.tool_calls],
                     "input_tokens": (reply.usage_metadata or {}).get("input_tokens"),
                     "cached": details.get("cache_read", 0)})
        if not reply.tool_calls:
            print(f"answer: {reply.content}")
            break
        for call in reply.tool_calls:
            result = TOOLS[call["name"]].invoke(call["args"]) if call["name"] in TOOLS else "unknown tool"
            messages.append(ToolMessage(result, tool_call_id=call["id"]))
    found = llm.with_structured_output(Report).invoke(
        messages + [HumanMessage("Report what you found as JSON.")])
    print(json.dumps({"steps": rows, "report": found.model_dump()}))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("question", nargs="?", default="What's the weather in Paris?")
    parser.add_argument("--base-url", default="http://127.0.0.1:8000/v1")
    parser.add_argument("--api-key", required=True)
    parser.add_argument("--model", default=None, help="default: the gateway's first model")
    parser.add_argument("--max-steps", type=int, default=3)
    args = parser.parse_args()
    try:
        return run(args)
    except openai.APIError as exc:   # a wrong key, an unknown model, no gateway: one line, exit 1
        return report(exc, args.base_url)


if __name__ == "__main__":
    raise SystemExit(main())
