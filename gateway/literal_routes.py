"""A route whose path parameter leaves some values to other routes: the literal segments
beside it (`input_tokens` of /v1/responses/input_tokens beside /v1/responses/{response_id}).

Starlette matches routes in order and a path parameter takes any segment, so a method the
literal route does not take (GET /v1/responses/input_tokens) reached the parameter's route
and was answered as a stored response not found (QA108). Invariant: a value in `taken` never
matches the parameter's route, for any method, so the literal route answers it (its 405 and
`Allow` for a method it does not take).
"""
from __future__ import annotations

from collections.abc import Callable

from starlette.routing import Match, Route


class RouteBesideLiterals(Route):
    """A route with a path parameter that leaves the values in `taken` (another route's
    literal segment: `input_tokens` of /v1/responses/input_tokens beside
    /v1/responses/{response_id}) to that route, for every method: a method it does not take
    is its 405 (its `Allow`), never this route's answer."""
    def __init__(self, path: str, endpoint: Callable, *, methods: list[str], taken: frozenset[str]) -> None:
        super().__init__(path, endpoint, methods=methods)
        self.taken = taken

    def matches(self, scope) -> tuple[Match, dict]:
        match, child_scope = super().matches(scope)
        if match is not Match.NONE and self.taken.intersection(child_scope["path_params"].values()):
            return Match.NONE, {}
        return match, child_scope
