"""`input_tokens_details.cache_write_tokens` of a local model's response: the prompt
tokens its worker wrote to the prefix cache (whole new blocks of the prompt), not the
prompt tokens it did not find cached."""
import uuid

import httpx

from gateway.backend import Finished, Usage
from gateway.choices import merged_usage
from gateway.local_generation import _finished
from gateway.responses_format import ResponsesRequest
from gateway.responses_objects import response_object
from shards.protocol import FinishEvent

BLOCK = 16   # the tiny gateway's engine default `block_size`


def _details(usage: Usage) -> dict:
    return response_object("resp_x", ResponsesRequest(model="m", input="hi"), usage=usage)["usage"][
        "input_tokens_details"]


def test_a_local_response_reports_the_whole_new_prompt_blocks_its_worker_wrote(gateway):
    text = f"Count the letters of {uuid.uuid4().hex} and then of {uuid.uuid4().hex}, please."
    response = httpx.post(f"{gateway.base_url}/v1/responses", headers=gateway.headers(), timeout=120,
                          json={"model": "tiny", "input": text, "max_output_tokens": 2})
    assert response.status_code == 200, response.text
    usage = response.json()["usage"]
    num_prompt, details = usage["input_tokens"], usage["input_tokens_details"]
    assert num_prompt % BLOCK and num_prompt > 2 * BLOCK   # a last partial block, never kept
    # a fresh prompt: its full blocks past the (chat template's) cached run are new
    assert details["cache_write_tokens"] == (num_prompt // BLOCK - details["cached_tokens"] // BLOCK) * BLOCK


def test_a_local_usage_takes_its_workers_count_and_n_choices_write_the_prompt_once():
    def finish(num_cached: int, num_written: int) -> FinishEvent:
        return FinishEvent("r", "stop", 40, num_cached, 3, 0.1, "w0", num_cache_write_tokens=num_written)

    assert _details(_finished(finish(0, 32)).usage) == {"cached_tokens": 0, "cache_write_tokens": 32}
    assert _details(_finished(finish(0, 0)).usage) == {"cached_tokens": 0, "cache_write_tokens": 0}  # caching off
    choices = [_finished(finish(0, 32)), _finished(finish(32, 0))]
    for index, one in enumerate(choices):
        one.choice = index
    assert merged_usage(choices).usage.cache_write_tokens == 32
    assert Usage(40, 3, 0).cache_write_tokens == 0   # no count known (a reply cut short): none claimed
    assert merged_usage([Finished("stop", Usage(40, 3, 0), choice=i) for i in (0, 1)]).usage.cache_write_tokens == 0
