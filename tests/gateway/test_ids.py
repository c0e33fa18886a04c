"""The gateway's ids: their shapes, and random parts no tenant can predict from `random`."""
from __future__ import annotations

import random
import re

from gateway.ids import ID_ALPHABET, new_id, new_tool_call_id, random_hex


def _made() -> list[str]:
    return [new_id("chatcmpl"), new_tool_call_id(), random_hex(24)]


def test_ids_have_their_shapes() -> None:
    response_id, call_id, hex_part = _made()
    assert re.fullmatch(r"chatcmpl-[0-9a-f]{24}", response_id)
    assert call_id.startswith("call_") and len(call_id) == 29 and set(call_id[5:]) <= set(ID_ALPHABET)
    assert re.fullmatch(r"[0-9a-f]{24}", hex_part) and len(random_hex(5)) == 5


def test_seeding_random_does_not_repeat_the_ids() -> None:
    """The Mersenne Twister behind `random` can be rebuilt from its outputs; the ids do not
    come from it, so knowing its state (here: seeding it) tells nothing of the next id."""
    random.seed(7)
    first = _made()
    random.seed(7)
    assert all(a != b for a, b in zip(first, _made()))


def test_tool_call_ids_use_the_whole_alphabet() -> None:
    seen = set("".join(new_tool_call_id()[5:] for _ in range(400)))
    assert seen == set(ID_ALPHABET)
