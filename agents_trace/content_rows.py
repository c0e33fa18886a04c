"""A step's `step_content` row: its request's messages (those new since the step its
content extends, `prefix_step`), its output and other choices (store.py writes it in the
step's transaction, after its `steps` row, store_rows.py).

Invariants: a step that never reached a model keeps at most about
`REFUSED_CONTENT_MAX_CHARS` of its request's content, the cut said in the stored entries
themselves (`capped_entries_json`); no stored content extends a step whose content was cut
or deleted (`content_row`).
"""
from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from agents_trace.records import CapturedContent, Step
from agents_trace.step_numbering import PlacedPrefix, with_prefix
from agents_trace.store_rows import REACHED_MODEL_SQL, reached_model

# A step that never reached a model (`reached_model` False: its tenant's limits refused it,
# its prompt was over the context, its client left while it queued) is charged nothing, yet
# its request may hold up to `max_body_bytes`: its stored content keeps this much (64 Ki
# characters, the spans' default `otlp_attribute_max_length`), the rest cut and said so in a
# last entry of role TRUNCATED_ROLE (QA179 F1).
REFUSED_CONTENT_MAX_CHARS = 65536
TRUNCATED_ROLE = "truncated"
REPLACE_CONTENT = ("INSERT OR REPLACE INTO step_content (tenant, session, idx, "
                   "num_prefix_messages, prefix_step, new_messages, output, other_outputs) "
                   "VALUES (?, ?, ?, ?, ?, ?, ?, ?)")


# the stored step (tenant, session, idx): whether it never reached a model (its content may
# be cut), its request id and arrival (`PlacedPrefix`), whether its content is stored
SELECT_PREFIX_STEP = (f"SELECT NOT {REACHED_MODEL_SQL}, s.request_id, s.arrived_s, c.idx IS NOT NULL FROM steps s "
                      "LEFT JOIN step_content c ON c.tenant = s.tenant AND c.session = s.session AND c.idx = s.idx "
                      "WHERE s.tenant = ? AND s.session = ? AND s.idx = ?")
# a stored later step's content extends (tenant, session, idx after ?, prefix_step ?)
SELECT_EXTENDED = "SELECT 1 FROM step_content WHERE tenant = ? AND session = ? AND idx > ? AND prefix_step = ? LIMIT 1"


def content_row(db: sqlite3.Connection, step: Step, content: CapturedContent, *,
                placed_prefix: PlacedPrefix | None = None) -> list:
    """`content_values` of `step`, read against what `db` stores so that no stored content
    extends a cut one (QA181 F1), a deleted one (QA197 F7) or another's (QA200 F1): content
    extending a stored step that never reached a model, or a step an earlier write stored
    (`placed_prefix`) that the store no longer holds with its content (the session deleted
    while live; another writer may have stored a step of its own there since), keeps its
    messages whole (`with_prefix`; a step not yet stored, one that ends later, may still
    come), and a step that never reached a model that a stored later step extends already
    (that one ended first) keeps its own request whole."""
    key = (step.tenant, step.session)
    if content.prefix_step is not None:
        prefix = db.execute(SELECT_PREFIX_STEP, (*key, content.prefix_step)).fetchone()   # one lookup for both
        is_unreached = prefix is not None and bool(prefix[0])
        is_gone = placed_prefix is not None and (prefix is None or not prefix[3]
                                                 or PlacedPrefix(prefix[1], prefix[2]) != placed_prefix)
        if is_unreached or is_gone:
            content = with_prefix(content, None)
    may_cut = reached_model(step) or db.execute(SELECT_EXTENDED, (*key, step.index, step.index)).fetchone() is None
    return content_values(step, step.index, content, may_cut=may_cut)


def content_values(step: Step, index: int, content: CapturedContent, *, may_cut: bool = True) -> list:
    """The values of `REPLACE_CONTENT` for `step`'s content, stored under `index` (a list:
    the index, [2], may be changed). A step that never reached a model keeps at most about
    `REFUSED_CONTENT_MAX_CHARS` of its request (`capped_entries_json`), unless not `may_cut`."""
    new_messages = json.dumps(list(content.new_messages), ensure_ascii=False, default=str)
    if may_cut and len(new_messages) > REFUSED_CONTENT_MAX_CHARS and not reached_model(step):
        new_messages = capped_entries_json(content.new_messages, REFUSED_CONTENT_MAX_CHARS)
    return [step.tenant, step.session, index, content.num_prefix_messages, content.prefix_step, new_messages,
            None if content.output is None else json.dumps(content.output, ensure_ascii=False, default=str),
            json.dumps(list(content.other_outputs), ensure_ascii=False, default=str)]


def capped_entries_json(entries: Sequence[Any], max_chars: int) -> str:
    """`entries` as a JSON list of at most about `max_chars` characters: the first entries
    whose JSON fits whole, then one `TRUNCATED_ROLE` entry for the rest: its `content` the
    start of their JSON (as text: at most what room is left), `num_entries` how many they
    are, `num_chars` their JSON's length. A role no message can have (content.py), so
    nothing reads it as a chat message."""
    texts = [json.dumps(entry, ensure_ascii=False, default=str) for entry in entries]
    num_kept, used = 0, 0
    while num_kept < len(texts) and used + len(texts[num_kept]) + 2 <= max_chars:
        used += len(texts[num_kept]) + 2
        num_kept += 1
    rest = ", ".join(texts[num_kept:])
    room = max(0, max_chars - used)
    start = rest[:room]
    overflow = len(json.dumps(start, ensure_ascii=False)) - 2 - room   # its quotes and backslashes, escaped
    if overflow > 0:   # (JSON text holds no control character: each escape adds one character)
        start = rest[:room - overflow]
    marker = {"role": TRUNCATED_ROLE, "content": start, "num_entries": len(texts) - num_kept, "num_chars": len(rest)}
    return "[" + ", ".join([*texts[:num_kept], json.dumps(marker, ensure_ascii=False)]) + "]"
