"""A multi-tenant agent workload, written as a `stepahead-trace/1` trace.

Each tenant has its own system prompt and tool schemas (a shared prefix of blocks every
session of the tenant starts with) and one domain's tool-transition patterns. Sessions
arrive as a Poisson process; within a session every step is one LLM call whose prompt is
the previous prompt plus the previous response plus what happened since (a tool result,
or a user turn). Between calls: a tool runs for a log-normal time whose median belongs to
the tool (some tools seconds, some tens of seconds), or the user thinks. With
`batch_lines_per_s`, the tenants also run Batch API jobs: evenly spaced lines of fresh
prompt blocks, `service_tier` "flex", no session, over the sessions' span, each tenant in
turn; they draw nothing from the random stream, so the sessions are the same with or
without them.

Invariants: records are sorted by arrival time `t`; a session's later steps carry the
tool run or think time before them as `gap_s` (the first step none); a session's prompts extend each
other block by block (its full blocks keep their ids; a partial last block gets a new id
once it is extended, since its content changed); hash ids are unique per tenant, and
consecutive from a base fixed by the seed (`block_id_base`), so workloads of other seeds
name other blocks: a replay builds a block's tokens from (tenant, id) alone, and every
workload calls its tenants tenant0, tenant1, ..., so ids counted from 1 in each would give
two workloads' prompts the same tokens (a gateway warmed by one would report cache hits on
the other's never-sent prompts). Every
knob has a range, and the workload's size a cap (limits.py), so what is generated fits in
memory and every line is one the trace readers accept.
"""
from __future__ import annotations

import hashlib
import math
import random
import sys
from collections.abc import Callable

from agents_trace.workload.limits import WorkloadBudget, WorkloadLimits
from agents_trace.workload.tool_patterns import TEXT_ANSWERS, USER, ToolPatterns
from agents_trace.workload.workload_config import WorkloadConfig
from cache.trace_format import TraceRecord


def _stable_unit(text: str) -> float:
    """A number in [0, 1) fixed by `text` (not Python's randomized hash)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big") / 2**64


def tool_median_s(config: WorkloadConfig, tool: str) -> float:
    """The median duration of a tool: log-uniform in the configured range, fixed by its
    name and `tool_seed` (default `seed`). Two workloads with the same `tool_seed` are
    other sessions of the same tenants: their tools take the same time."""
    low, high = config.tool_median_s_range
    tool_seed = config.seed if config.tool_seed is None else config.tool_seed
    return math.exp(math.log(low) + _stable_unit(f"{tool_seed}:{tool}") * (math.log(high) - math.log(low)))


MAX_SCHEMA_TOOLS = 12   # a tenant's prefix holds the schemas of its domain's first tools, this many at most
BLOCK_ID_BASE_BITS = 52   # the base is below 2**52: ids stay exact in every JSON reader (53 bits)


def block_id_base(seed: int) -> int:
    """Where the block ids of the workload of `seed` start (its first id is one past it):
    fixed by the seed, drawn from [0, 2**52) so two workloads of n ids each overlap with
    odds of about 2n / 2**52 (and the ids stay under 2**53 while a tenant draws fewer than
    2**52). The same seed gives the same base whatever the other knobs
    (the sessions of a seed are the same with or without batch lines, with any tool seed)."""
    digest = hashlib.blake2b(f"block-ids:{seed}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> (64 - BLOCK_ID_BASE_BITS)


class _Blocks:
    """Hands out a tenant's hash ids and tracks one prompt's block ids as it grows.

    NOTE: a prompt of `limit` tokens or more (the context cap) is never sent, so it gets
    no ids: only its token count grows, and the tenant's counter moves on as if they were
    made (later prompts keep the ids they would have had). A tool result of a billion
    tokens then ends its session at no cost in memory."""

    def __init__(self, block_size: int, counter: list[int], limit: int):
        self.block_size = block_size
        self.limit = limit
        self._counter = counter
        self.ids: list[int] = []
        self.num_tokens = 0

    def _new_id(self) -> int:
        self._counter[0] += 1
        return self._counter[0]

    def fresh(self) -> "_Blocks":
        """An empty prompt drawing ids from the same tenant's counter."""
        return _Blocks(self.block_size, self._counter, self.limit)

    def fork(self) -> "_Blocks":
        child = _Blocks(self.block_size, self._counter, self.limit)
        child.ids, child.num_tokens = list(self.ids), self.num_tokens
        return child

    def grow(self, num_tokens: int) -> None:
        if num_tokens <= 0:
            return
        before = self.num_tokens
        self.num_tokens += num_tokens
        num_blocks = -(-self.num_tokens // self.block_size)
        if self.num_tokens >= self.limit:   # never sent: count the ids it would take, make none
            self._counter[0] += num_blocks - before // self.block_size
            return
        if before % self.block_size:  # the partial tail changes content
            self.ids.pop()
        while len(self.ids) < num_blocks:
            self.ids.append(self._new_id())


def warn_on_stderr(message: str) -> None:
    """`message` on its own stderr line, above a progress bar if one is drawn."""
    from tqdm import tqdm
    tqdm.write(message, file=sys.stderr)


def generate_workload(config: WorkloadConfig, patterns: list[ToolPatterns],
                      on_session: Callable[[], None] | None = None,
                      limits: WorkloadLimits = WorkloadLimits(),
                      on_warning: Callable[[str], None] = warn_on_stderr) -> list[TraceRecord]:
    """The records of the whole workload, sorted by arrival time. `on_session` (a
    progress bar's) is called once per session made; it does not change the records.
    A workload past `limits` is a ValueError, raised as soon as it passes them.
    Sessions whose first prompt does not fit `max_context_tokens` make no request: the
    workload then has fewer sessions than asked, and `on_warning` is told how many are
    missing (once; a tenant left with none is a ValueError, as ever)."""
    if not patterns:
        raise ValueError("no tool patterns to learn sessions from")
    budget = WorkloadBudget(limits)
    rng = random.Random(config.seed)
    records: list[TraceRecord] = []
    total_sessions = config.num_tenants * config.num_sessions
    arrivals = []
    t = 0.0
    for _ in range(total_sessions):
        t += rng.expovariate(config.session_rate_per_s)
        arrivals.append(t)
    order = [i % config.num_tenants for i in range(total_sessions)]
    rng.shuffle(order)
    prefixes = []
    for tenant_index in range(config.num_tenants):
        domain = patterns[tenant_index % len(patterns)]
        counter = [block_id_base(config.seed)]
        prefix = _Blocks(config.block_size, counter, config.max_context_tokens)
        schema = config.tool_schema_tokens_per_tool * min(len(domain.tools), MAX_SCHEMA_TOOLS)
        prefix.grow(rng.randint(*config.system_prompt_tokens) + schema)
        budget.spend(0, len(prefix.ids))
        prefixes.append((f"tenant{tenant_index}", domain, prefix))
    session_counts = [0] * config.num_tenants
    num_empty_sessions = 0
    for start, tenant_index in zip(arrivals, order):
        tenant, domain, prefix = prefixes[tenant_index]
        session = f"{tenant}-s{session_counts[tenant_index]}"
        session_counts[tenant_index] += 1
        session_records = _session_records(config, rng, tenant, session, domain, prefix.fork(), start, budget)
        num_empty_sessions += not session_records
        records.extend(session_records)
        if on_session is not None:
            on_session()
    if total_sessions and not records:
        longest = max(prefix.num_tokens for _, _, prefix in prefixes)
        raise ValueError(f"no request fits in --max-context-tokens {config.max_context_tokens}: the tenants' "
                         f"system prompts and tool schemas alone take up to {longest} tokens")
    _refuse_tenants_without_requests(config, prefixes, records)
    if num_empty_sessions:
        on_warning(_empty_sessions_warning(config, num_empty_sessions, total_sessions))
    records.extend(_batch_records(config, [(tenant, prefix) for tenant, _, prefix in prefixes],
                                  max((r.t for r in records), default=0.0), budget))
    records.sort(key=lambda r: r.t)
    return records


def _batch_records(config: WorkloadConfig, tenants: list[tuple[str, _Blocks]], span_s: float,
                   budget: WorkloadBudget) -> list[TraceRecord]:
    """`batch_lines_per_s` flex lines a second over `span_s`, each tenant in turn, each
    of fresh blocks (no session: how Batch API lines reach the workers); counted against
    `budget` before any is made."""
    rate = config.batch_lines_per_s
    if not rate:
        return []
    num_lines = int(span_s * rate)
    budget.spend(num_lines, num_lines * -(-config.batch_prompt_tokens // config.block_size),
                 cause=f"--batch-lines-per-s {rate:g} ({num_lines:,} lines over the sessions' {span_s:,.0f} s)")
    lines = []
    for n in range(num_lines):
        tenant, prefix = tenants[n % len(tenants)]
        blocks = prefix.fresh()
        blocks.grow(config.batch_prompt_tokens)
        lines.append(TraceRecord(t=n / rate, input_tokens=config.batch_prompt_tokens,
                                 output_tokens=config.batch_output_tokens, tenant=tenant, hash_ids=blocks.ids,
                                 service_tier="flex"))
    return lines


def _refuse_tenants_without_requests(config, prefixes, records: list[TraceRecord]) -> None:
    """A tenant asked for but left without a single request (its shared prefix, plus a
    first turn, does not fit the context cap) would vanish from the workload silently,
    and every per-tenant figure of a replay would then describe fewer tenants than asked."""
    seen = {record.tenant for record in records}
    missing = [(tenant, prefix.num_tokens) for tenant, _, prefix in prefixes if tenant not in seen]
    if missing:
        names = ", ".join(f"{tenant}'s takes {num_tokens}" for tenant, num_tokens in missing)
        raise ValueError(f"no request of {len(missing)} of the {config.num_tenants} tenants fits in "
                         f"--max-context-tokens {config.max_context_tokens}: a request is the tenant's system "
                         f"prompt and tool schemas ({names} tokens) and at least one turn; raise "
                         "--max-context-tokens or lower --system-prompt-tokens")


def _empty_sessions_warning(config: WorkloadConfig, num_empty: int, num_asked: int) -> str:
    return (f"warning: {num_empty} of the {num_asked} sessions asked for are left out: their first prompt "
            "(the tenant's system prompt and tool schemas, plus the first user turn) is "
            f"--max-context-tokens {config.max_context_tokens} tokens or more; raise --max-context-tokens "
            "or lower --user-turn-tokens, --system-prompt-tokens or --tool-schema-tokens-per-tool")


def _with_user_turns(steps: list[str]) -> list[str]:
    """`steps` with a USER before each tool that follows a text answer: the patterns have
    such transitions (a recorded turn that begins without a user message, ASSISTANT_TEXT
    -> cd), but a reply that called no tool leaves nothing to return a result for, so the
    call comes from the reply to the next user turn."""
    out: list[str] = []
    for symbol in steps:
        if out and out[-1] in TEXT_ANSWERS and symbol not in TEXT_ANSWERS and symbol != USER:
            out.append(USER)
        out.append(symbol)
    return out


def _session_records(config, rng, tenant, session, domain, blocks, start_s, budget) -> list[TraceRecord]:
    """One session's calls. Each step's `after` says what its prompt grew by, and what its
    arrival waited for: "user", a user turn after a think time (the previous reply was a
    text answer); "tool:NAME", the result of the tool the previous reply called, after
    that tool's run time. Each later step arrives `service_s` (a modelled reply time) plus
    that wait after the step before it, and carries the wait alone as its `gap_s`: a
    replay waits it after the live reply ends, so the modelled reply time is not counted
    on top of the real one."""
    steps = _with_user_turns(domain.sample_session(rng, use_turn_counts=config.recorded_turns))
    out: list[TraceRecord] = []
    now = start_s
    after = "start"
    gap_before: float | None = None   # the tool run or think time drawn before this step (none before the first)
    for i, symbol in enumerate(steps):
        if symbol in TEXT_ANSWERS:
            continue  # a response, produced by the call before it
        if symbol == USER:
            blocks.grow(rng.randint(*config.user_turn_tokens))
        else:
            blocks.grow(int(rng.lognormvariate(math.log(config.tool_result_tokens_median),
                                               config.tool_result_tokens_sigma)))
        if blocks.num_tokens >= config.max_context_tokens:
            break
        response = steps[i + 1] if i + 1 < len(steps) else "ASSISTANT_TEXT"
        asks_tool = response not in TEXT_ANSWERS and response != USER
        output = rng.randint(*(config.tool_call_output_tokens if asks_tool else config.text_answer_output_tokens))
        budget.spend(1, len(blocks.ids))
        out.append(TraceRecord(
            t=now, tenant=tenant, session=session, after=after,
            tool_calls=[response] if asks_tool else [], input_tokens=blocks.num_tokens,
            output_tokens=output, hash_ids=list(blocks.ids), gap_s=gap_before))
        blocks.grow(output)
        service_s = 0.02 * output  # a rough response time before the agent acts
        if asks_tool:
            gap = rng.lognormvariate(math.log(tool_median_s(config, response)), config.tool_sigma)
            after = f"tool:{response}"
        else:
            gap = rng.lognormvariate(math.log(config.think_time_median_s), config.think_time_sigma)
            after = "user"
        now += service_s + gap
        gap_before = gap
    return out
