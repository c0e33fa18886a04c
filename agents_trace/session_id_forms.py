"""What a session id (or a part of one) that a person typed or pasted may stand for.

A reply's `x-session-id` carries a non-ASCII id, or one holding `%`, percent-encoded
(header_ids), and the gateway stores an id stripped and cut (conversation). Invariant:
the text as given always comes first, so an id stored exactly as typed is found as typed.
"""
from __future__ import annotations

from agents_trace.conversation import MAX_CLIENT_ID_CHARS
from agents_trace.header_ids import percent_decoded


def given_id_forms(given: str) -> tuple[str, ...]:
    """What a session id (or part of one) a person typed or pasted may stand for: the text
    as given, then, where it differs, the text percent-decoded as the gateway decodes a
    request's `x-session-id` (header_ids), since an answer's `x-session-id` carries a
    non-ASCII id or one with `%` percent-encoded (`job 100%25` is `job 100%`)."""
    decoded = percent_decoded(given)
    return (given,) if decoded == given else (given, decoded)


def whole_id_forms(given: str) -> tuple[str, ...]:
    """`given_id_forms` of a whole session id, then, where they differ, each as the gateway
    stores an id: without surrounding whitespace and cut to its first MAX_CLIENT_ID_CHARS
    characters, so the id a client sent (its log's) finds the session however long it was."""
    forms = given_id_forms(given)
    stored = tuple(form.strip()[:MAX_CLIENT_ID_CHARS] for form in forms)
    return tuple(dict.fromkeys(form for form in (*forms, *stored) if form))
