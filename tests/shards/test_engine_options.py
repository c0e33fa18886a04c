"""Engine options are checked by name, type and range before anything starts."""
from __future__ import annotations

import pytest

from shards.engine import LocalEngine
from shards.engine_options import EngineOptionError


def test_every_default_option_of_the_engine_passes():
    import inspect

    defaults = {name: p.default for name, p in inspect.signature(LocalEngine.__init__).parameters.items()
                if p.kind is inspect.Parameter.KEYWORD_ONLY}
    LocalEngine.check_options(defaults)
    LocalEngine.check_options({"num_host_blocks": 0, "min_p_return": 1, "max_queue_wait_s": 2.5,
                               "policy": "predictive", "transport": "ray", "threads_per_worker": None,
                               "max_decode_stall_s": 0.25})
    LocalEngine.check_options({"transport_options": {"start_method": "spawn"}})
    LocalEngine.check_options({"transport": "ray", "transport_options": {"address": "auto"}})


@pytest.mark.parametrize("options, message", [
    ({"decode_batch": 0}, "decode_batch must be an integer >= 1, not 0"),
    ({"num_host_blocks": -1}, "num_host_blocks must be an integer >= 0"),
    ({"block_size": 16.0}, "block_size must be an integer"),
    ({"max_running": True}, "max_running must be an integer"),
    ({"min_p_return": 1.5}, "min_p_return must be at most 1"),
    ({"health_timeout_s": "10"}, "health_timeout_s must be a number > 0"),
    ({"tenant_homes": 1}, "tenant_homes must be true or false"),
    ({"flex_blocks_evicted_first": "yes"}, "flex_blocks_evicted_first must be true or false"),
    ({"max_decode_stall_s": -0.5}, "max_decode_stall_s must be a number >= 0"),
    ({"prefill_chunk_tokens": 0}, "prefill_chunk_tokens must be an integer >= 1"),
    ({"policy": "fifo"}, "policy must be one of lru, predictive, ttl, kvflow, not 'fifo'"),
    ({"transport": "grpc"}, "transport must be one of local, ray"),
    ({"num_workers": 2}, "unknown engine option 'num_workers'"),
    ({"transport_options": {"address": "auto"}}, "unknown local transport option 'address'; known: start_method"),
    ({"transport": "local", "transport_options": {"start_method": "fork"}},
     "start_method must be one of auto, forkserver, spawn, not 'fork'"),
    # QA222 F1, F2: a GPU reservation for a CPU model was dropped silently; "cuda:1" names no device in an actor
    ({"transport": "ray", "transport_options": {"num_gpus_per_worker": 1}},
     "num_gpus_per_worker reserves GPUs for a model on CUDA; this one runs on 'cpu'"),
    ({"transport": "ray", "device": "cpu", "transport_options": {"num_gpus_per_worker": 0.5}}, "runs on 'cpu'"),
    ({"transport": "ray", "device": "cuda:1"}, "device 'cuda:1' with the Ray transport: use \"cuda\""),
])
def test_bad_options_name_the_option(options, message):
    with pytest.raises(EngineOptionError, match=message):
        LocalEngine.check_options(options)


def test_a_ray_model_on_cuda_may_reserve_gpus():
    LocalEngine.check_options({"transport": "ray", "device": "cuda", "transport_options": {"num_gpus_per_worker": 0.5}})
    LocalEngine.check_options({"device": "cuda:1"})   # a local worker process may name its GPU
