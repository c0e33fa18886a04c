"""The fields of a Responses request that are not its parameters here, carried into the
chat request it runs as (gateway/responses_format.py `to_chat_body`), so that they are
treated as that chat request's own unknown fields are: upstream models receive them as
sent, local models refuse the ones they cannot honour by name (gateway/local_refusals.py)
and ignore the hints (docs/api.md, the chat table). A field chat knows is chat's
(`seed`, `stop`: applied, or a 400 naming it when of the wrong type).

Invariant: a chat parameter the Responses request spells its own way (`MOVED`: what the
chat request's own value is built from) is a 400 naming it and the parameter to use, as
OpenAI answers it, never carried (it would stand beside, or replace, the value built from
the Responses parameter); `n` other than 1 is a 400 too (a response has one output). The
OpenAI SDK sends only the Responses parameters, so its requests carry nothing here.
"""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from gateway.errors import invalid_request

# chat parameters a Responses request spells another way, to the Responses parameter that says it
MOVED = {"messages": "input", "response_format": "text.format", "max_completion_tokens": "max_output_tokens",
         "max_tokens": "max_output_tokens", "logprobs": "include", "reasoning_effort": "reasoning.effort",
         "verbosity": "text.verbosity"}


def chat_extras(request: BaseModel) -> dict[str, Any]:
    """The request's fields that are not Responses parameters here, for its chat request; a
    null one of `MOVED` is none, as a null parameter is."""
    extras = dict(request.model_extra or {})
    for name, moved_to in MOVED.items():
        if extras.pop(name, None) is not None:
            raise invalid_request(f"Unsupported parameter: '{name}'. In the Responses API, this parameter has "
                                  f"moved to '{moved_to}'.", param=name, code="unsupported_parameter")
    if extras.get("n") not in (None, 1):
        raise invalid_request("Unsupported parameter: 'n'. A response has one output; send the request once per "
                              "output wanted.", param="n", code="unsupported_parameter")
    return extras
