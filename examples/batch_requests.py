"""The Batch API against stepahead: a file of chat requests run in the background on the
gateway's workers, followed with a progress bar, its answers read back by custom_id.

    stepahead serve                       # prints the base URL and a demo key
    python examples/batch_requests.py --api-key sk-... --count 16

The requests go through the same endpoint, limits and prefix cache as a client's (the
system prompt every line shares is prefilled once, as whole 16-token blocks; the first
lines may run before it is cached); a gateway stopped midway goes on
with the batch at its next start. The batch's id is printed when it is created, and
`--batch-id` follows that batch again (say, after the gateway was restarted).
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import openai
from _errors import MAX_RETRIES, report
from openai import OpenAI
from tqdm import tqdm

# long enough to fill whole 16-token blocks of the prefix cache (with the chat template's
# own tokens, about 48), which every line shares: a shorter one shares no whole block
SYSTEM_PROMPT = ("You answer the questions of a word game. Reply with exactly one common English word in "
                 "lower case: no punctuation, no explanation, nothing but the word itself.")
QUESTIONS = ("Name a color.", "Name a fruit.", "Name an animal.", "Name a city.", "Name a planet.",
             "Name a metal.", "Name a tree.", "Name a river.")


def requests_file(model: str, count: int, max_tokens: int) -> bytes:
    lines = [{"custom_id": f"q{n}", "method": "POST", "url": "/v1/chat/completions", "body": {
        "model": model, "max_tokens": max_tokens, "temperature": 0.0,
        "messages": [{"role": "system", "content": SYSTEM_PROMPT},
                     {"role": "user", "content": QUESTIONS[n % len(QUESTIONS)]}]}} for n in range(count)]
    return "\n".join(json.dumps(line) for line in lines).encode()


def create(client: OpenAI, model: str | None, count: int, max_tokens: int):
    """Upload the requests file and start a batch of it; its id is printed on stderr."""
    model = model or client.models.list().data[0].id
    upload = client.files.create(file=("questions.jsonl", requests_file(model, count, max_tokens)), purpose="batch")
    batch = client.batches.create(input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h",
                                  metadata={"example": "batch_requests"})
    print(f"batch_requests: created {batch.id} (follow it again with --batch-id {batch.id})", file=sys.stderr)
    return batch


def follow(client: OpenAI, batch):
    """Poll the batch, with a progress bar, until it has ended; return it as it ended."""
    with tqdm(total=batch.request_counts.total, desc=batch.id[:18], unit="request") as bar:
        while batch.status in ("validating", "in_progress", "finalizing", "cancelling"):
            time.sleep(0.5)
            batch = client.batches.retrieve(batch.id)
            bar.update(batch.request_counts.completed + batch.request_counts.failed - bar.n)
    return batch


def summarize(client: OpenAI, batch, started_s: float) -> int:
    """Print the answers, the errors and a JSON summary; 0 when every line was answered."""
    answers = {}
    if batch.output_file_id:
        for line in client.files.content(batch.output_file_id).text.splitlines():
            result = json.loads(line)
            answers[result["custom_id"]] = result["response"]["body"]["choices"][0]["message"]["content"]
    for custom_id in sorted(answers, key=lambda c: int(c[1:]))[:8]:
        print(f"{custom_id}: {answers[custom_id]!r}")
    for error in (batch.errors.data if batch.errors and batch.errors.data else [])[:3]:   # the file's own faults
        print(f"batch failed: {error.code}: {error.message}" + (f" (line {error.line})" if error.line else ""))
    if batch.error_file_id:   # why lines failed: the first few errors, as the error file says
        for line in client.files.content(batch.error_file_id).text.splitlines()[:3]:
            result = json.loads(line)
            error = result.get("error") or (result.get("response") or {}).get("body", {}).get("error") or {}
            print(f"{result['custom_id']} failed: {error.get('code')}: {error.get('message')}")
    print(json.dumps({"batch": batch.id, "status": batch.status, "completed": batch.request_counts.completed,
                      "failed": batch.request_counts.failed, "seconds": round(time.monotonic() - started_s, 2),
                      "cached_tokens": batch.usage.input_tokens_details.cached_tokens if batch.usage else 0,
                      "input_tokens": batch.usage.input_tokens if batch.usage else 0}))
    return 0 if batch.status == "completed" and not batch.request_counts.failed else 1   # a failed line fails the run


def main() -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--base-url", default="http://127.0.0.1:8000/v1")
    parser.add_argument("--api-key", required=True)
    parser.add_argument("--model", default=None, help="default: the gateway's first model")
    parser.add_argument("--count", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--batch-id", default=None,
                        help="follow this batch (created earlier) instead of creating one; --model, --count "
                             "and --max-tokens are then unused")
    args = parser.parse_args()
    client = OpenAI(base_url=args.base_url, api_key=args.api_key, max_retries=MAX_RETRIES)
    try:
        batch = (client.batches.retrieve(args.batch_id) if args.batch_id
                 else create(client, args.model, args.count, args.max_tokens))
    except openai.APIError as exc:   # a wrong key, an unknown model, no gateway: one line, exit 1
        return report(exc, args.base_url)
    started_s = time.monotonic()
    try:
        return summarize(client, follow(client, batch), started_s)
    except openai.APIError as exc:   # the gateway stopped answering mid-batch: the batch itself goes on
        return report(exc, args.base_url, then=(
            f"Batch {batch.id} goes on with the gateway (a stopped one resumes it at its next start): follow it "
            f"again with --batch-id {batch.id}, or client.batches.retrieve({batch.id!r})."))


if __name__ == "__main__":
    raise SystemExit(main())
