"""Wire models of the chat messages a request carries: roles, content, earlier tool calls.

Invariant: a `Message` that validated has what its role needs (a tool message its
`tool_call_id`; an assistant's content, tool calls, refusal, or a legacy `function_call` or
`audio` reference, so that those are refused by name, not as a message lacking content: a
`function_call` for every model (`chat_checks`), `audio` by local models (`local_refusals`);
the others their content), and every content part a string `type`; a text part has its text,
a refusal part (an assistant's only) its refusal. A legacy `role: "function"` message is a
400 `unsupported_parameter` naming its `role` (function results are tool messages). Unknown
fields are kept for upstream models.
"""
from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

_ALLOW = ConfigDict(extra="allow", strict=True)


class FunctionCallIn(BaseModel):
    model_config = _ALLOW
    name: str
    arguments: str = ""


class ToolCallIn(BaseModel):
    """A tool call an assistant message made earlier in the conversation."""

    model_config = _ALLOW
    id: str
    type: Literal["function"] = "function"
    function: FunctionCallIn


class Message(BaseModel):
    """One chat message. `content` is a string or a list of parts (`{"type": "text", ...}`);
    an assistant's may instead be its `refusal` (as OpenAI's replies carry one), and only an
    assistant's parts may be `{"type": "refusal", "refusal": ...}`."""

    model_config = _ALLOW
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | Annotated[list[dict[str, Any]], Field(min_length=1)] | None = None   # [] is a 400, as at OpenAI
    name: str | None = None
    tool_calls: list[ToolCallIn] | None = None
    tool_call_id: str | None = None
    refusal: str | None = None

    @field_validator("role", mode="before")
    @classmethod
    def _no_function_role(cls, role: Any) -> Any:
        """The legacy function-calling flow's result message, refused by name
        (`unsupported_parameter`, one of `gateway.validation_errors.OWN_CODES`)."""
        if role == "function":
            raise PydanticCustomError(
                "unsupported_parameter", "Legacy 'function' messages are not supported; send a function's "
                "result as a tool message ({\"role\": \"tool\", \"tool_call_id\": ..., \"content\": ...}) "
                "answering the assistant message's 'tool_calls'.")
        return role

    def sets(self, field: str) -> bool:
        """Whether the message sets the field it carries beyond the declared ones (a legacy
        `function_call`, an `audio` reference): not null, as SDKs send both."""
        return (self.model_extra or {}).get(field) is not None

    @model_validator(mode="after")
    def _check_role_fields(self) -> "Message":
        if self.role == "assistant":
            if self.content is None and not self.tool_calls and self.refusal is None \
                    and not self.sets("function_call") and not self.sets("audio"):
                raise ValueError("an assistant message needs 'content', 'tool_calls' or 'refusal'")
        elif self.content is None:
            raise ValueError(f"a {self.role} message needs 'content'")
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("'tool_call_id' must be the id of the call it answers, a non-empty string")
        if isinstance(self.content, list):
            for part in self.content:
                if not isinstance(part.get("type"), str):
                    raise ValueError("each content part needs a string 'type'")
                if part["type"] == "text" and not isinstance(part.get("text"), str):
                    raise ValueError("a text content part needs a string 'text'")
                if part["type"] == "refusal" and self.role != "assistant":
                    raise ValueError(f"a {self.role} message cannot have a refusal content part")
                if part["type"] == "refusal" and not isinstance(part.get("refusal"), str):
                    raise ValueError("a refusal content part needs a string 'refusal'")
        return self
