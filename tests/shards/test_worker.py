"""The worker loop: fair admission, cache reports before terminal events, health,
and the noisy-neighbour bound on a virtual clock."""
from __future__ import annotations

import random
import time
import dataclasses
from dataclasses import dataclass, field

import pytest

from cache.events import BlockStored
from cache.tiers import Tier
from shards.model_runner import ModelRunner
from cache.policies import make_policy
from shards.protocol import (ApplyForecast, CacheEventsReport, CacheSnapshot, CancelRequest, ErrorEvent, FinishEvent,
                             Ping, Pong, SamplingParams, SessionMoved, Shutdown, StatsRequest,
                             TokenEvent, WorkItem)
from cache.policies.workflow_aware import NEXT
from tests.cache.test_policies_predictive import lognormal_forecast
from shards.worker import WorkerConfig, WorkerLoop


def _loop(tiny_loaded, **config):
    runner = ModelRunner(tiny_loaded, num_hot_blocks=64, block_size=16)
    out: list = []
    loop = WorkerLoop("w0", WorkerConfig(model="tiny", **config), runner, tiny_loaded.tokenizer, out.append)
    return loop, out


def _item(request_id, tenant="t", num_tokens=40, max_tokens=3, seed=0):
    rng = random.Random(seed)
    return WorkItem(request_id, tenant, [rng.randrange(250) for _ in range(num_tokens)],
                    SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True))


def _run(loop, max_steps=200):
    for _ in range(max_steps):
        if not loop.has_work():
            return
        loop.step()
    raise AssertionError("the loop did not drain")


def test_worker_loop_reports_cache_events_before_the_finish_event(tiny_loaded):
    loop, out = _loop(tiny_loaded)
    loop.handle(_item("r1"))
    _run(loop)
    kinds = [type(m).__name__ for m in out]
    assert kinds.index("CacheEventsReport") < kinds.index("FinishEvent")
    report = next(m for m in out if isinstance(m, CacheEventsReport))
    assert all(isinstance(e, BlockStored) for e in report.events)
    assert sum(len(e.hashes) for e in report.events) == 2  # 40 prompt + 2 fed tokens: 2 full blocks


def test_worker_loop_sends_prompt_logprobs_once_even_when_the_first_token_stops(tiny_loaded):
    loop, out = _loop(tiny_loaded)
    scored = dataclasses.replace(_item("probe"), sampling=SamplingParams(max_tokens=3, temperature=0.0,
                                                                        ignore_eos=True, prompt_logprobs=1))
    loop.handle(scored)
    _run(loop)
    events = [m for m in out if isinstance(m, TokenEvent)]
    assert len(events[0].prompt_logprobs) == 39 and all(e.prompt_logprobs is None for e in events[1:])
    first = events[0].token_ids[0]
    # the same prompt, its greedy first token made a stop token: one event, no token, the scores
    stopping = dataclasses.replace(scored, request_id="stops", sampling=dataclasses.replace(
        scored.sampling, stop_token_ids=(first,)))
    out.clear()
    loop.handle(stopping)
    _run(loop)
    (event,) = [m for m in out if isinstance(m, TokenEvent)]
    assert event.token_ids == [] and event.text == ""
    assert [s.token_id for s in event.prompt_logprobs] == scored.prompt_token_ids[1:]
    assert [s.logprob for s in event.prompt_logprobs] == pytest.approx([s.logprob for s in events[0].prompt_logprobs],
                                                                      abs=1e-4)
    finish = next(m for m in out if isinstance(m, FinishEvent))
    assert finish.num_cached_tokens == 0 and finish.num_output_tokens == 0  # scored whole, nothing cached used


def test_worker_loop_answers_ping_and_snapshots_its_blocks(tiny_loaded):
    loop, out = _loop(tiny_loaded, snapshot_interval_s=0.0)
    loop.handle(Ping(7, 1.5))
    assert out[-1] == Pong("w0", 7, 1.5, 0, 0)
    loop.handle(_item("r1"))
    _run(loop)
    loop.housekeeping()
    snapshot = out[-1]
    assert isinstance(snapshot, CacheSnapshot) and len(snapshot.hot_hashes) == 2


def _served_then_waiting_on_a_tool(tiny_loaded, policy_name: str):
    """A worker with `policy_name` served session "s", whose forecast (just applied) says
    a tool call comes next; returns the loop, its policy and the forecast's time."""
    runner = ModelRunner(tiny_loaded, num_hot_blocks=64, block_size=16, policy=make_policy(policy_name))
    loop = WorkerLoop("w0", WorkerConfig(model="tiny"), runner, tiny_loaded.tokenizer, [].append)
    item = _item("r1")
    item.session = "s"
    loop.handle(item)
    _run(loop)
    now = time.time()
    loop.handle(ApplyForecast(lognormal_forecast("s", now, median_s=30.0, sigma=0.5, p_return=0.9)))
    return loop, runner.blocks.policy, now


def test_worker_loop_session_moved_ends_the_sessions_pin(tiny_loaded):
    loop, policy, now = _served_then_waiting_on_a_tool(tiny_loaded, "predictive")
    assert policy.is_pinned("s", now + 1.0)
    loop.handle(SessionMoved("t", "s"))
    assert not policy.is_pinned("s", now + 1.0)


@pytest.mark.parametrize("name", ["ttl", "kvflow"])
def test_worker_loop_runs_the_anchor_policies_on_forecasts(tiny_loaded, name):
    """The anchors serve real requests and act on the gateway's forecasts: a tool wait
    pins the session (ttl) or files it one step from execution (kvflow)."""
    _, policy, now = _served_then_waiting_on_a_tool(tiny_loaded, name)
    if name == "ttl":
        assert policy.is_pinned("s", now + 1.0)
    else:
        assert policy.session_class("s") == NEXT


def test_worker_loop_admits_a_quiet_tenant_past_the_soft_limit(tiny_loaded):
    loop, out = _loop(tiny_loaded, max_running=2)
    for i in range(4):
        loop.handle(_item(f"n{i}", "noisy", max_tokens=50, seed=i))
    loop.admit_ready()
    assert sorted(loop.prefilling) == ["n0", "n1"]
    loop.handle(_item("q0", "quiet", seed=9))
    loop.admit_ready()
    # past the soft limit each tenant may hold its share (half) of the hard limit, 4
    assert "q0" in loop.prefilling and loop.num_active == 5
    loop.step()  # the quiet tenant (fewest slots, within its share) is prefilled first
    first_tokens = [m.request_id for m in out if isinstance(m, TokenEvent)]
    assert first_tokens[0] == "q0" and "q0" in loop.running
    loop.handle(CancelRequest("n3"))
    assert any(isinstance(m, FinishEvent) and m.request_id == "n3" and m.finish_reason == "cancelled"
               for m in out)
    assert loop.handle(Shutdown()) is False


def _tokens_until_a_newcomer_starts(loop, out, a_tokens=60, b_tokens=1) -> list[str]:
    """Stream "a", then send a 96-token newcomer "b" and step until b's first token:
    whose tokens were sent meanwhile, in order (b's last)."""
    loop.handle(_item("a", max_tokens=a_tokens))
    loop.step()
    loop.handle(_item("b", num_tokens=96, max_tokens=b_tokens, seed=1))
    start = len(out)
    while not any(isinstance(m, TokenEvent) and m.request_id == "b" for m in out[start:]):
        loop.step()
    return [m.request_id for m in out[start:] if isinstance(m, TokenEvent)]


@pytest.mark.parametrize("stall_s", [None, 1.5])
def test_worker_loop_stall_bound_lets_decodes_between_a_newcomers_chunks(tiny_loaded, stall_s):
    """A 96-token newcomer prefills in 6 chunks of 16 while "a" streams, riding off; on
    the loop's clock each chunk takes 1 s. Prefill first (no bound): "a" gets no token
    until the newcomer's first. Bound 1.5 s: "a" passes it after every second chunk, so
    it gets a decode pass there (2 before the newcomer's first token)."""
    now = [0.0]
    runner = ModelRunner(tiny_loaded, num_hot_blocks=64, block_size=16)
    out: list = []
    loop = WorkerLoop("w0", WorkerConfig(model="tiny", prefill_chunk_tokens=16, max_decode_stall_s=stall_s,
                                         decodes_ride_chunks=False),
                      runner, tiny_loaded.tokenizer, out.append, clock=lambda: now[0])
    advance = loop.prefill.advance

    def one_second_chunk(task, *args):
        now[0] += 1.0
        return advance(task, *args)

    loop.prefill.advance = one_second_chunk
    tokens = _tokens_until_a_newcomer_starts(loop, out)
    assert tokens.index("b") == (0 if stall_s is None else 2)
    _run(loop)
    finished = {m.request_id: m.num_output_tokens for m in out if isinstance(m, FinishEvent)}
    assert finished == {"a": 60, "b": 1}


def test_worker_loop_running_requests_ride_a_newcomers_prefill_chunks(tiny_loaded):
    """"a" streams while a 96-token newcomer prefills in 6 chunks of 16. With a stall
    bound of 0 "a" is always due, so it decodes in each chunk's pass (6 tokens before
    the newcomer's first), and both get the tokens they would get alone (greedy)."""
    runner = ModelRunner(tiny_loaded, num_hot_blocks=64, block_size=16)
    out: list = []
    loop = WorkerLoop("w0", WorkerConfig(model="tiny", prefill_chunk_tokens=16, max_decode_stall_s=0.0), runner,
                      tiny_loaded.tokenizer, out.append)
    passes = []
    step_with_chunk = runner.step_with_chunk
    runner.step_with_chunk = lambda chunk, cache, seqs: passes.append(len(seqs)) or step_with_chunk(chunk, cache, seqs)
    tokens = _tokens_until_a_newcomer_starts(loop, out, a_tokens=30, b_tokens=5)
    assert tokens.index("b") == 6 and passes == [1] * 6
    _run(loop)
    alone = {item.request_id: _alone(tiny_loaded, item)
             for item in (_item("a", max_tokens=30), _item("b", num_tokens=96, max_tokens=5, seed=1))}
    together = {name: [t for m in out if isinstance(m, TokenEvent) and m.request_id == name for t in m.token_ids]
                for name in ("a", "b")}
    assert together == alone


def _alone(tiny_loaded, item) -> list[int]:
    loop, out = _loop(tiny_loaded)
    loop.handle(item)
    _run(loop)
    return [t for m in out if isinstance(m, TokenEvent) for t in m.token_ids]


@pytest.mark.parametrize("failing", ["a", "b"])
def test_worker_loop_a_failure_in_a_packed_pass_ends_only_its_own_request(tiny_loaded, failing):
    """Sampling fails in a packed pass for the rider "a" (its first ride) or for the
    newcomer "b" (its first token): that request alone gets an error, and the other
    sends every token it would send alone."""
    runner = ModelRunner(tiny_loaded, num_hot_blocks=64, block_size=16)
    out: list = []
    loop = WorkerLoop("w0", WorkerConfig(model="tiny", prefill_chunk_tokens=16, max_decode_stall_s=0.0), runner,
                      tiny_loaded.tokenizer, out.append)
    sample, chunk_done = runner._sample, loop.prefill._chunk_done

    def sample_failing_for_a(seq, logits):
        if seq.item.request_id == "a" and failing == "a":
            raise RuntimeError("probability tensor contains nan")
        return sample(seq, logits)

    def first_token_failing_for_b(task, end, *args):
        if task.item.request_id == "b" and failing == "b" and end == len(task.item.prompt_token_ids):
            raise RuntimeError("probability tensor contains nan")
        return chunk_done(task, end, *args)

    loop.prefill._chunk_done = first_token_failing_for_b
    loop.handle(_item("a", max_tokens=30))
    loop.step()
    runner._sample = sample_failing_for_a  # from "a"'s first ride on
    start = len(out)
    loop.handle(_item("b", num_tokens=96, max_tokens=5, seed=1))
    _run(loop)
    errors = {m.request_id for m in out if isinstance(m, ErrorEvent)}
    finished = {m.request_id for m in out if isinstance(m, FinishEvent)}
    other = "b" if failing == "a" else "a"
    assert errors == {failing} and finished == {other}
    items = {"a": _item("a", max_tokens=30), "b": _item("b", num_tokens=96, max_tokens=5, seed=1)}
    sent = [t for m in out if isinstance(m, TokenEvent) and m.request_id == other for t in m.token_ids]
    assert sent == _alone(tiny_loaded, items[other])
    assert all(b.ref_count == 0 for b in runner.blocks.blocks(Tier.HOT))
    if failing == "a":  # it failed at its first ride, before the newcomer's first token
        after = [(type(m).__name__, m.request_id) for m in out[start:] if isinstance(m, (TokenEvent, ErrorEvent))]
        assert after.index(("ErrorEvent", "a")) < after.index(("TokenEvent", "b"))
        assert ("TokenEvent", "a") not in after


def test_worker_loop_stall_bound_shorter_than_a_chunk_alternates_passes_and_chunks(tiny_loaded):
    """Without riding, a bound no chunk can meet must not starve the newcomer: decode
    passes and chunks alternate."""
    runner = ModelRunner(tiny_loaded, num_hot_blocks=64, block_size=16)
    out: list = []
    loop = WorkerLoop("w0", WorkerConfig(model="tiny", prefill_chunk_tokens=16, max_decode_stall_s=0.0,
                                         decodes_ride_chunks=False), runner, tiny_loaded.tokenizer, out.append)
    tokens = _tokens_until_a_newcomer_starts(loop, out)
    assert tokens.index("b") == 5  # one decode of "a" after each of the first five chunks


def test_worker_loop_decodes_running_requests_in_passes_of_decode_batch(tiny_loaded):
    loop, out = _loop(tiny_loaded, decode_batch=2)
    passes = []
    step_many = loop.runner.step_many
    loop.runner.step_many = lambda seqs: passes.append(len(seqs)) or step_many(seqs)
    for i in range(5):
        loop.handle(_item(f"r{i}", seed=i, max_tokens=4))
    loop.step()  # prefills all five (first tokens), then one decode each
    assert passes == [2, 2, 1]
    _run(loop)
    finished = [m for m in out if isinstance(m, FinishEvent)]
    assert sorted(m.request_id for m in finished) == [f"r{i}" for i in range(5)]
    assert all(m.finish_reason == "length" and m.num_output_tokens == 4 for m in finished)
    loop.handle(StatsRequest())
    stats = out[-1].stats  # 3 decodes per request after its prefill's token, in passes of 2
    assert passes == [2, 2, 1] * 3
    assert (stats["num_decoded_tokens"], stats["num_decode_passes"]) == (15, 9)


def test_worker_loop_a_row_whose_sampling_fails_in_a_batched_pass_ends_alone(tiny_loaded):
    """"r1"'s sampling fails in a batched decode pass after the pass itself succeeded:
    "r1" gets an error; "r0" and "r2" send every token they would send alone."""
    loop, out = _loop(tiny_loaded, decode_batch=4)
    sample = loop.runner._sample

    def failing_for_r1(seq, logits):
        if seq.item.request_id == "r1" and len(seq.output_ids) >= 2:
            raise RuntimeError("probability tensor contains nan")
        return sample(seq, logits)

    loop.runner._sample = failing_for_r1
    items = {f"r{i}": _item(f"r{i}", seed=i, max_tokens=6) for i in range(3)}
    for item in items.values():
        loop.handle(item)
    _run(loop)
    assert {m.request_id for m in out if isinstance(m, ErrorEvent)} == {"r1"}
    assert {m.request_id for m in out if isinstance(m, FinishEvent)} == {"r0", "r2"}
    for name in ("r0", "r2"):
        sent = [t for m in out if isinstance(m, TokenEvent) and m.request_id == name for t in m.token_ids]
        assert sent == _alone(tiny_loaded, items[name])


def test_worker_loop_failed_batch_retries_alone_and_fails_only_the_culprit(tiny_loaded):
    loop, out = _loop(tiny_loaded)
    step = loop.runner.step

    def step_failing_for_r1(seq):
        if seq.item.request_id == "r1":
            raise RuntimeError("bad request")
        return step(seq)

    loop.runner.step = step_failing_for_r1
    loop.runner.batches_decode = False  # step_many goes through `step`, one at a time...
    step_many = loop.runner.step_many

    def batch_fails_when_r1_in_it(seqs):  # ...after a batched pass failed as a whole
        if len(seqs) > 1 and any(s.item.request_id == "r1" for s in seqs):
            raise RuntimeError("batch failed")
        return step_many(seqs)

    loop.runner.step_many = batch_fails_when_r1_in_it
    for i in range(3):
        loop.handle(_item(f"r{i}", seed=i, max_tokens=4))
    _run(loop)
    errors = [m for m in out if type(m).__name__ == "ErrorEvent"]
    assert [m.request_id for m in errors] == ["r1"] and "bad request" in errors[0].message
    finished = {m.request_id: m.finish_reason for m in out if isinstance(m, FinishEvent)}
    assert finished == {"r0": "length", "r2": "length"}
    assert all(b.ref_count == 0 for b in loop.runner.blocks.blocks(Tier.HOT))


# --- the noisy-neighbour bound, on a virtual clock --------------------------------------

@dataclass
class _Detok:
    stopped: bool = False

    def push(self, token):
        return "x"

    def flush(self):
        return ""


@dataclass
class _Seq:
    item: WorkItem
    started_s: float
    first_token_s: float = 0.0
    num_cached_tokens: int = 0
    output_ids: list = field(default_factory=list)
    output_logprobs: list = field(default_factory=list)
    prompt_logprobs: list | None = None
    detokenizer: _Detok = field(default_factory=_Detok)

    @property
    def num_kv_tokens(self):
        return len(self.item.prompt_token_ids) + len(self.output_ids)


class _Blocks:
    def take_events(self):
        return []


class _TimedRunner:
    """Costs time on a virtual clock like the real runner costs wall time: a prefill
    per prompt token, a decode per forward pass, plus `extra_row_frac` of one for each
    further request decoded in the same pass (SmolLM2 on this CPU: about 0.17)."""

    def __init__(self, prefill_s_per_token=50e-6, decode_s=0.004, extra_row_frac=0.25):
        self.now = 0.0
        self.prefill_s_per_token = prefill_s_per_token
        self.decode_s = decode_s
        self.extra_row_frac = extra_row_frac
        self.blocks = _Blocks()
        self.loaded = type("Loaded", (), {"max_context_tokens": 100_000})()

    def step(self, seq):
        self.now += self.decode_s
        seq.output_ids.append(1)
        return 1

    def step_many(self, seqs):
        self.now += self.decode_s * (1 + self.extra_row_frac * (len(seqs) - 1))
        for seq in seqs:
            seq.output_ids.append(1)
        return [1] * len(seqs)

    def commit_prompt(self, seq):
        pass

    def finish(self, seq):
        pass

    def release(self, seq):
        pass

    def is_stop_token(self, token, params):
        return False


@dataclass
class _Task:
    seq: _Seq
    num_done_tokens: int = 0
    compute_s: float = 0.0
    admitted_s: float = 0.0

    @property
    def item(self):
        return self.seq.item

    @property
    def num_remaining_tokens(self):
        return len(self.seq.item.prompt_token_ids) - self.num_done_tokens


class _TimedPrefill:
    """Chunked prefill on the virtual clock."""

    def __init__(self, runner, chunk_tokens=128):
        self.runner = runner
        self.chunk_tokens = chunk_tokens

    def begin(self, item):
        return _Task(_Seq(item, self.runner.now))

    def advance(self, task, max_tokens=None):
        num_tokens = min(max_tokens or self.chunk_tokens, len(task.item.prompt_token_ids) - task.num_done_tokens)
        self.runner.now += self.runner.prefill_s_per_token * num_tokens
        task.num_done_tokens += num_tokens
        if task.num_done_tokens < len(task.item.prompt_token_ids):
            return None
        task.seq.first_token_s = self.runner.now
        task.seq.output_ids.append(1)
        return 1

    def abort(self, task):
        pass


def _arrivals(tenant, rate_per_s, duration_s, seed):
    rng = random.Random(seed)
    t, out = 0.0, []
    while True:
        t += rng.expovariate(rate_per_s)
        if t > duration_s:
            return out
        out.append((t, tenant))


def _quiet_p99_ttft(burst: bool, fair: bool, duration_s=60.0) -> float:
    """p99 TTFT of the quiet tenant while the noisy one sends 10x its usual rate (or not).
    `fair=False` labels every request with one tenant: a plain FIFO worker."""
    noisy_rate = 20.0 if burst else 2.0
    arrivals = sorted(_arrivals("quiet", 2.0, duration_s, 1) + _arrivals("noisy", noisy_rate, duration_s, 2))
    runner = _TimedRunner()
    ttft: dict[str, float] = {}
    arrived: dict[str, float] = {}

    def emit(message):
        if isinstance(message, TokenEvent) and message.request_id not in ttft:
            ttft[message.request_id] = runner.now - arrived[message.request_id]

    loop = WorkerLoop("w0", WorkerConfig(model="tiny", max_running=4), runner, None, emit,
                      clock=lambda: runner.now, prefill=_TimedPrefill(runner))
    pending = list(reversed(arrivals))

    def poll():
        while pending and pending[-1][0] <= runner.now:
            t, tenant = pending.pop()
            request_id = f"{tenant}-{len(arrived)}"
            arrived[request_id] = t
            loop.handle(WorkItem(request_id, tenant if fair else "all", [1] * 200,
                                 SamplingParams(max_tokens=20)))

    while pending or loop.has_work():
        if not loop.has_work():
            runner.now = max(runner.now, pending[-1][0])
        poll()
        loop.step(poll=poll)
    quiet = sorted(v for k, v in ttft.items() if k.startswith("quiet"))
    return quiet[int(0.99 * (len(quiet) - 1))]


def test_worker_loop_noisy_tenant_at_10x_raises_quiet_p99_ttft_at_most_1_5x():
    base = _quiet_p99_ttft(burst=False, fair=True)
    burst = _quiet_p99_ttft(burst=True, fair=True)
    assert burst / base <= 1.5, (base, burst)


def test_worker_loop_fifo_baseline_breaks_the_noisy_neighbour_bound():
    base = _quiet_p99_ttft(burst=False, fair=False)
    burst = _quiet_p99_ttft(burst=True, fair=False)
    assert burst / base > 1.5, (base, burst)


def test_worker_loop_sends_one_logprob_per_token_only_when_asked(tiny_loaded):
    loop, out = _loop(tiny_loaded, decode_batch=4)
    for i, logprobs in enumerate((None, 0, 3)):
        item = _item(f"r{i}", seed=i, max_tokens=5)
        item.sampling = SamplingParams(max_tokens=5, temperature=0.0, ignore_eos=True, logprobs=logprobs)
        loop.handle(item)
    _run(loop)
    events = {f"r{i}": [m for m in out if isinstance(m, TokenEvent) and m.request_id == f"r{i}"] for i in range(3)}
    assert all(e.logprobs is None for e in events["r0"])
    for request_id, num_top in (("r1", 0), ("r2", 3)):
        ids = [t for e in events[request_id] for t in e.token_ids]
        scored = [s for e in events[request_id] for s in e.logprobs or []]
        assert len(ids) == 5 and [s.token_id for s in scored] == ids
        assert all(s.logprob <= 0 and len(s.top) == num_top for s in scored)
        if num_top:  # greedy: the sampled token is the likeliest one
            assert all(s.top[0] == (s.token_id, s.logprob) for s in scored)
            assert all(a[1] >= b[1] for s in scored for a, b in zip(s.top, s.top[1:]))


def test_worker_loop_logit_bias_steers_the_sample_but_not_the_reported_logprob(tiny_loaded):
    loop, out = _loop(tiny_loaded)
    plain = _item("plain", max_tokens=1)
    plain.sampling = SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True, logprobs=1)
    loop.handle(plain)
    _run(loop)
    [first] = [m for m in out if isinstance(m, TokenEvent)]
    greedy = first.token_ids[0]
    banned = _item("banned", max_tokens=1)  # the same prompt, the greedy token banned
    banned.sampling = SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True, logprobs=1,
                                     logit_bias=((greedy, -100.0),))
    loop.handle(banned)
    _run(loop)
    [second] = [m for m in out if isinstance(m, TokenEvent) and m.request_id == "banned"]
    assert second.token_ids[0] != greedy
    # logprobs are the model's own: the banned token is still reported as the likeliest
    assert second.logprobs[0].top[0][0] == greedy
    assert second.logprobs[0].top[0][1] == pytest.approx(first.logprobs[0].logprob, abs=1e-4)


@pytest.mark.parametrize("prefill_order,first", [("deadline", "short"), ("arrival", "long")])
def test_worker_loop_prefills_the_shortest_remaining_prompt_first_by_default(tiny_loaded, prefill_order, first):
    """A 160-token prompt and then a 20-token one from the same tenant, admitted together:
    by deadline the short one (2 chunks against 10) gets its first token first."""
    loop, out = _loop(tiny_loaded, prefill_chunk_tokens=16, prefill_order=prefill_order)
    loop.handle(_item("long", num_tokens=160, max_tokens=2, seed=1))
    loop.handle(_item("short", num_tokens=20, max_tokens=2, seed=2))
    _run(loop)
    first_tokens = [m.request_id for m in out if isinstance(m, TokenEvent)]
    assert first_tokens[0] == first
    assert {m.request_id for m in out if isinstance(m, FinishEvent)} == {"long", "short"}


def _flex(item):
    return dataclasses.replace(item, flex=True)


def test_worker_loop_admits_and_prefills_the_default_tier_before_flex_requests(tiny_loaded):
    """A short flex prompt queued first, then a long default one: by deadline alone the
    short one would go first; the default request is admitted first and gets its first
    token first, and with one slot the flex request waits for it."""
    loop, out = _loop(tiny_loaded, prefill_chunk_tokens=16)
    loop.handle(_flex(_item("batch", num_tokens=20, max_tokens=2, seed=2)))
    loop.handle(_item("agent", num_tokens=160, max_tokens=2, seed=1))
    _run(loop)
    first_tokens = [m.request_id for m in out if isinstance(m, TokenEvent)]
    assert first_tokens[0] == "agent"
    assert {m.request_id for m in out if isinstance(m, FinishEvent)} == {"agent", "batch"}
    one_slot, _ = _loop(tiny_loaded, max_running=1)
    one_slot.handle(_flex(_item("batch", seed=2)))
    one_slot.handle(_item("agent", seed=1))
    one_slot.admit_ready()
    assert list(one_slot.prefilling) == ["agent"] and len(one_slot.waiting) == 1


def test_worker_loop_a_flex_prefill_runs_one_chunk_between_decode_passes(tiny_loaded):
    """A 96-token flex newcomer (6 chunks of 16) while "a" streams: "a" gets a token
    between the newcomer's chunks, where a default newcomer's prefill runs first
    (`test_worker_loop_stall_bound_lets_decodes_between_a_newcomers_chunks`)."""
    loop, out = _loop(tiny_loaded, prefill_chunk_tokens=16)
    loop.handle(_item("a", max_tokens=60))
    loop.step()
    loop.handle(_flex(_item("b", num_tokens=96, max_tokens=1, seed=1)))
    start = len(out)
    while not any(isinstance(m, TokenEvent) and m.request_id == "b" for m in out[start:]):
        loop.step()
    sent = [m.request_id for m in out[start:] if isinstance(m, TokenEvent)]
    assert sent[:sent.index("b")].count("a") >= 5
