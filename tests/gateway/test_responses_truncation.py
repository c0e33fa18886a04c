"""`truncation: "auto"` of the Responses API (gateway/responses_truncation.py): which
turns, then which tool rounds of the last turn, are cut, the search for the fewest cuts,
and the gateway's replies with them."""
import openai
import pytest

from tests.gateway.conftest import KEYS


@pytest.fixture(scope="module")
def client(gateway):
    return openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=KEYS["alpha"], max_retries=0)


def test_the_oldest_turn_is_whole_turns_after_the_system_messages():
    from gateway.responses_truncation import oldest_turn, without

    def without_oldest_turn(messages):
        cut = oldest_turn(messages)
        return None if cut is None else without(messages, cut)
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u1"},
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "c1", "content": "r"}, {"role": "assistant", "content": "a1"},
                {"role": "user", "content": "u2"}, {"role": "assistant", "content": "a2"},
                {"role": "user", "content": "u3"}]
    once = without_oldest_turn(messages)
    assert [m["content"] for m in once] == ["s", "u2", "a2", "u3"]
    twice = without_oldest_turn(once)
    assert [m["content"] for m in twice] == ["s", "u3"]
    assert without_oldest_turn(twice) is None  # the last turn is never dropped


def test_truncation_auto_drops_the_oldest_turns_until_the_input_fits(client):
    long_turn = "word " * 600  # 3,000 tokens for the tiny model's tokenizer
    conversation = [{"role": "user", "content": long_turn}, {"role": "assistant", "content": "noted"},
                    {"role": "user", "content": long_turn}, {"role": "assistant", "content": "noted"},
                    {"role": "user", "content": long_turn + "Which word?"}]
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="tiny", input=conversation, max_output_tokens=2)
    assert caught.value.code == "context_length_exceeded" and caught.value.param == "input"
    reply = client.responses.create(model="tiny", input=conversation, max_output_tokens=2, truncation="auto")
    assert reply.truncation == "auto" and reply.status in ("completed", "incomplete")
    assert 6000 <= reply.usage.input_tokens <= 8192  # two of the three turns (9,000 tokens)


def test_turn_cuts_leave_what_cutting_one_oldest_turn_at_a_time_leaves():
    """Known answer and invariant: `TurnCuts.kept(k)` is `oldest_turn` cut k times, for
    every k, on conversations with tool calls and system messages between turns."""
    from gateway.responses_truncation import TurnCuts, oldest_turn, without
    roles = ["system", "user", "assistant", "tool", "user", "system", "assistant", "user", "developer",
             "assistant", "user", "assistant", "tool", "assistant", "user"]
    messages = [{"role": role, "content": f"{role}{index}"} for index, role in enumerate(roles)]
    cuts = TurnCuts.of(messages)
    assert (cuts.first, cuts.ends) == (1, (4, 7, 10, 14))
    one_at_a_time = messages
    for num_cut in range(1, len(cuts.ends) + 1):
        one_at_a_time = without(one_at_a_time, oldest_turn(one_at_a_time))
        assert cuts.kept(messages, num_cut) == one_at_a_time
    assert oldest_turn(one_at_a_time) is None   # only the last turn left
    assert TurnCuts.of([{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]).ends == ()


def _agent_loop(num_rounds: int, calls_per_round: int = 1) -> list[dict]:
    """A system message, one user message, then `num_rounds` tool rounds (an assistant
    message calling `calls_per_round` tools, then their results)."""
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "task"}]
    for round_index in range(num_rounds):
        ids = [f"c{round_index}_{call}" for call in range(calls_per_round)]
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}} for i in ids]})
        messages += [{"role": "tool", "tool_call_id": i, "content": f"result {i}"} for i in ids]
    return messages


def _calls_and_results_paired(messages: list[dict]) -> bool:
    called = {call["id"] for m in messages for call in m.get("tool_calls") or ()}
    answered = {m["tool_call_id"] for m in messages if m["role"] == "tool"}
    return called == answered


def test_an_agent_loops_oldest_tool_rounds_are_cut_after_its_task():
    """QA209 F1, known answer: one user message and three rounds of two parallel calls has
    two cuts to make, each the oldest round whole; the task and the newest round stay."""
    from gateway.responses_truncation import TurnCuts
    messages = _agent_loop(3, calls_per_round=2)
    cuts = TurnCuts.of(messages)
    assert (cuts.first, cuts.ends, cuts.head, cuts.rounds, cuts.num_cuts) == (1, (), 2, (5, 8), 2)
    once, twice = cuts.kept(messages, 1), cuts.kept(messages, 2)
    kept_results = [m["content"] for m in once if m["role"] == "tool"]
    assert kept_results == ["result c1_0", "result c1_1", "result c2_0", "result c2_1"]
    assert twice == messages[:2] + messages[8:]
    assert _calls_and_results_paired(once) and _calls_and_results_paired(twice)
    assert TurnCuts.of(_agent_loop(1)).num_cuts == 0   # the newest round is never cut


def test_user_messages_in_a_row_open_one_turn_whose_task_is_never_cut():
    """QA217 F1: a task, then "go ahead", then tool rounds: the task was a turn of its own,
    cut first, and the model went on without it."""
    from gateway.responses_truncation import TurnCuts
    messages = _agent_loop(3)
    messages.insert(2, {"role": "user", "content": "go ahead"})
    cuts = TurnCuts.of(messages)
    assert (cuts.ends, cuts.head, cuts.num_cuts) == ((), 3, 2)
    for num_cut in range(1, cuts.num_cuts + 1):
        assert cuts.kept(messages, num_cut)[1:3] == messages[1:3]   # the task and "go ahead"


def test_a_developer_message_between_rounds_opens_the_next_round():
    """QA217 F2: it joined the rounds either side into one cut (and went with the older)."""
    from gateway.responses_truncation import TurnCuts
    messages = _agent_loop(3)
    messages.insert(6, {"role": "developer", "content": "two steps left"})   # after round 2's result
    cuts = TurnCuts.of(messages)
    assert (cuts.head, cuts.rounds) == (2, (4, 6))
    assert cuts.kept(messages, 1) == messages[:2] + messages[4:]
    assert cuts.kept(messages, 2)[2]["content"] == "two steps left"


def test_cuts_of_turns_then_rounds_keep_calls_with_results_and_only_shorten():
    """Invariant, on random conversations of turns with tool rounds: every cut keeps the
    leading system message, the last turn's opening message and its newest message, pairs
    every call with its result, and keeps a subset of what one cut fewer kept."""
    import random

    from gateway.responses_truncation import TurnCuts
    chooser = random.Random(209)
    for _ in range(200):
        messages = [{"role": "system", "content": "s"}]
        for turn in range(chooser.randint(1, 4)):
            turn_messages = _agent_loop(chooser.randint(0, 4), chooser.randint(1, 3))[1:]
            for m in turn_messages:
                m["content"] = m["content"] and f"{turn}:{m['content']}"
                for call in m.get("tool_calls") or ():
                    call["id"] = f"{turn}{call['id']}"
                if m["role"] == "tool":
                    m["tool_call_id"] = f"{turn}{m['tool_call_id']}"
            messages += turn_messages + ([{"role": "assistant", "content": "done"}] if chooser.random() < 0.5 else [])
        cuts = TurnCuts.of(messages)
        last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
        before = messages
        for num_cut in range(1, cuts.num_cuts + 1):
            kept = cuts.kept(messages, num_cut)
            assert kept[0] is messages[0] and kept[-1] is messages[-1] and messages[last_user] in kept
            assert _calls_and_results_paired(kept) and len(kept) < len(before)
            assert all(any(m is k for m in before) for k in kept)
            before = kept


def test_truncation_auto_cuts_an_agent_loops_oldest_tool_rounds(client):
    """QA209 F1: one user message, then tool rounds past the context: "auto" runs with the
    oldest rounds cut (it answered context_length_exceeded, as "disabled" does), and the
    response still stores every input item."""
    tool = {"type": "function", "name": "read_file", "parameters": {"type": "object", "properties": {}}}
    items = [{"role": "user", "content": "summarise the repo"}]
    for index in range(4):
        items += [{"type": "function_call", "call_id": f"c{index}", "name": "read_file", "arguments": "{}"},
                  {"type": "function_call_output", "call_id": f"c{index}", "output": "word " * 1200}]
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="tiny", input=items, tools=[tool], max_output_tokens=2)
    assert caught.value.code == "context_length_exceeded"
    reply = client.responses.create(model="tiny", input=items, tools=[tool], max_output_tokens=2, truncation="auto")
    assert reply.status in ("completed", "incomplete") and 3600 < reply.usage.input_tokens <= 8192
    assert len(client.responses.input_items.list(reply.id, limit=100).data) == len(items)


@pytest.mark.parametrize("fits_from", [1, 2, 3, 5, 8, 13, 999, 1000, None])
def test_the_fewest_turns_cut_are_found_in_logarithmically_many_tries(fits_from):
    """Known answer: the smallest k whose cut fits (or all 1,000 turns' outcome when none
    does), after at most 2 log2(1000) + 2 tries (cutting one at a time took k tries, each
    rendering the whole conversation: QA141's 1,000 turns 48-57 s); a refusal other than
    the context's at the first k that fits is that k's outcome, as one at a time."""
    import asyncio

    from gateway.errors import ApiError, invalid_request
    from gateway.responses_truncation import TurnCuts, fewest_turns_cut
    cuts, tries = TurnCuts(1, tuple(range(2, 1002))), []

    async def outcome_of(num_cut: int):
        tries.append(num_cut)
        if fits_from is None or num_cut < fits_from:
            raise invalid_request("too long", param="messages", code="context_length_exceeded")
        if num_cut == fits_from == 13:
            raise invalid_request("bad template", param="messages")
        return f"cut {num_cut}"

    num_cut, outcome = asyncio.run(fewest_turns_cut(cuts, outcome_of))
    assert num_cut == (fits_from or 1000)
    if fits_from is None:
        assert isinstance(outcome, ApiError) and outcome.code == "context_length_exceeded"
    elif fits_from == 13:
        assert isinstance(outcome, ApiError) and outcome.message == "bad template"
    else:
        assert outcome == f"cut {fits_from}"
    assert len(tries) <= 2 * 10 + 2 and len(set(tries)) == len(tries)
