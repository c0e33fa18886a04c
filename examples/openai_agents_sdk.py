"""The OpenAI Agents SDK against stepahead: an agent with a function tool and a typed
final output, through the Responses API (the SDK's default) or Chat Completions.

    stepahead serve                       # prints the base URL and a demo key
    python examples/openai_agents_sdk.py --api-key sk-... "What's the weather in Paris?"
    python examples/openai_agents_sdk.py --api-key sk-... --api chat_completions
    python examples/openai_agents_sdk.py --api-key sk-... --conversation

With `--conversation` the gateway keeps the run's turns in a conversation of the
Conversations API (`conversation_id`): each turn sends only its new items, and the
conversation lists the whole run afterwards.

The SDK runs the loop. Each turn re-sends the conversation with the tools and the output
schema (`text.format` / `response_format` json_schema), so stepahead serves the repeated
prefix from its KV cache, and a local model's final answer is JSON valid against the
output type. The
SDK's own trace export (to OpenAI) is turned off: no network is needed, and stepahead
traces the session itself (one session per run, named by the x-session-id header).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import uuid

import openai
from _errors import MAX_RETRIES, report
from agents import (Agent, ModelSettings, OpenAIChatCompletionsModel, OpenAIResponsesModel, Runner, function_tool,
                    set_tracing_disabled)
from agents.exceptions import MaxTurnsExceeded
from openai import AsyncOpenAI
from pydantic import BaseModel


@function_tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return json.dumps({"city": city, "forecast": "sunny", "celsius": 21})


MODEL_CLASSES = {"responses": OpenAIResponsesModel, "chat_completions": OpenAIChatCompletionsModel}


class Report(BaseModel):
    """The agent's final answer, as a program reads it."""

    city: str
    forecast: str
    celsius: float


async def run(args: argparse.Namespace) -> dict:
    set_tracing_disabled(True)
    session = f"agents-sdk-{uuid.uuid4().hex[:8]}"
    client = AsyncOpenAI(base_url=args.base_url, api_key=args.api_key, max_retries=MAX_RETRIES,
                         default_headers={"x-session-id": session})
    model = args.model or (await client.models.list()).data[0].id
    name = "weather"
    agent = Agent(name=name, instructions="You are a helpful assistant. Use the tool, then report.",
                  tools=[get_weather], output_type=Report,
                  model=MODEL_CLASSES[args.api](model=model, openai_client=client),
                  # the first turn must consult the tool; the SDK then resets the choice to "auto"
                  # the SDK sends no agent name of its own: name it so the trace shows which agent ran
                  model_settings=ModelSettings(max_tokens=96, temperature=0.0, tool_choice="required",
                                               extra_headers={"x-agent-name": name}))
    conversation = await client.conversations.create() if args.conversation else None
    result = await Runner.run(agent, args.question, max_turns=args.max_turns,
                              conversation_id=conversation.id if conversation else None)
    usage = result.context_wrapper.usage
    out = {"session": session, "report": result.final_output.model_dump(), "requests": usage.requests,
           "input_tokens": usage.input_tokens, "cached_tokens": usage.input_tokens_details.cached_tokens,
           "tools_called": [item.raw_item.name for item in result.new_items if item.type == "tool_call_item"]}
    if conversation is not None:
        out["conversation_items"] = [item.type async for item in client.conversations.items.list(
            conversation.id, order="asc")]
    await client.close()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("question", nargs="?", default="What's the weather in Paris?")
    parser.add_argument("--base-url", default="http://127.0.0.1:8000/v1")
    parser.add_argument("--api-key", required=True)
    parser.add_argument("--model", default=None, help="default: the gateway's first model")
    parser.add_argument("--max-turns", type=int, default=4)
    parser.add_argument("--api", choices=list(MODEL_CLASSES), default="responses")
    parser.add_argument("--conversation", action="store_true",
                        help="keep the run in a conversation on the gateway (Responses API only)")
    args = parser.parse_args()
    if args.conversation and args.api != "responses":
        parser.error("--conversation needs --api responses")
    # the SDK logs a failed request ("Error getting response") before it raises it: the one line below says it
    logging.getLogger("openai.agents").addHandler(logging.NullHandler())
    try:
        out = asyncio.run(run(args))
    except openai.APIError as exc:   # a wrong key, an unknown model, no gateway: one line, exit 1
        return report(exc, args.base_url)
    except MaxTurnsExceeded:   # as the other agent examples stop at --max-steps: one line, exit 0
        print(f"no final answer within --max-turns {args.max_turns}: the model kept calling tools "
              "(its turns are in the gateway's trace of this session)")
        return 0
    print(f"report: {out['report']}")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
