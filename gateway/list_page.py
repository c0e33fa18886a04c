"""One page of an OpenAI list endpoint (`limit`, `order`, `after`), over items with ids.

Invariants: a page holds at most `limit` items, in `order` ("asc": as stored, "desc":
reversed), starting right after the item `after` names (an unknown id is a 400);
`has_more` says whether items follow the page; bad query values (and `before`, which these
lists do not take) are 400s naming the parameter. `limit` is 1-MAX_LIMIT, DEFAULT_LIMIT
when not given, as OpenAI's lists of batches, conversation items and response input items
take it; a list with other bounds names them (`list_page`'s `default_limit` and
`max_limit`: the Files API's 1-10,000, default 10,000).
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from agents_trace.query_params import bound_code
from gateway.errors import ApiError, invalid_request

DEFAULT_LIMIT = 20
MAX_LIMIT = 100


@dataclass(frozen=True, slots=True)
class ListPage:
    limit: int = DEFAULT_LIMIT
    order: str = "desc"
    after: str | None = None

    def of(self, items: Sequence[dict]) -> dict:
        ordered = list(items) if self.order == "asc" else list(reversed(items))
        start = 0
        if self.after is not None:
            ids = [item.get("id") for item in ordered]
            if self.after not in ids:
                raise self.unknown_after()
            start = ids.index(self.after) + 1
        return listed(ordered[start:start + self.limit], start + self.limit < len(ordered))

    def unknown_after(self, what: str = "item") -> ApiError:
        """The 400 for an `after` that names no `what` of the list."""
        return invalid_request(f"No {what} with id '{self.after}' to list after.", param="after")


def listed(data: list[dict], has_more: bool) -> dict:
    """A page as OpenAI's list endpoints answer it."""
    return {"object": "list", "data": data, "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None, "has_more": has_more}


def list_page(query: Mapping[str, str], default_limit: int = DEFAULT_LIMIT, max_limit: int = MAX_LIMIT) -> ListPage:
    """The page a list's query asks for: `limit` from 1 to `max_limit` (`default_limit`
    when not given), `order`, `after`."""
    raw_limit = query.get("limit", str(default_limit))
    # NOTE: not `int()` alone, which also takes "1_0", " 5" and other scripts' digits (QA143)
    limit = int(raw_limit) if re.fullmatch(r"-?[0-9]+", raw_limit) else None
    if limit is None or not 1 <= limit <= max_limit:   # (OpenAI's codes: integer_above_max_value, ...)
        raise invalid_request(f"'limit' must be an integer from 1 to {max_limit}, not {raw_limit!r}.",
                              param="limit", code=bound_code(limit, 1, max_limit, is_int=True))
    if "before" in query:
        raise invalid_request("'before' is not supported here: page with 'after' (and 'order').", param="before",
                              code="unsupported_parameter")
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise invalid_request(f"'order' must be 'asc' or 'desc', not {order!r}.", param="order", code="invalid_value")
    return ListPage(limit, order, query.get("after"))
