"""What the Files API knows of a file apart from its bytes: its record (`StoredFile`, as the
API's file object), its purposes, and the `expires_after` policy an upload or a batch's
output may set.
"""
from __future__ import annotations

from dataclasses import dataclass

from gateway.errors import ApiError, invalid_request

PURPOSES = ("batch", "batch_output", "user_data", "assistants", "assistants_output", "fine-tune", "vision", "evals")
OUTPUT_PURPOSES = ("batch_output", "assistants_output")   # what the server makes: never an upload's
UPLOAD_PURPOSES = tuple(purpose for purpose in PURPOSES if purpose not in OUTPUT_PURPOSES)
MIN_EXPIRY_S, MAX_EXPIRY_S = 3600, 30 * 24 * 3600
BATCH_INPUT_EXPIRY_S = MAX_EXPIRY_S   # as at OpenAI, an upload for the Batch API expires after 30 days


def file_not_found(file_id: str, param: str = "file_id") -> ApiError:
    return ApiError(404, f"No such File object: {file_id}", "invalid_request_error", "not_found", param)


@dataclass(frozen=True, slots=True)
class StoredFile:
    id: str
    bytes: int
    created_at: int
    filename: str
    purpose: str
    expires_at: int | None = None

    def as_object(self) -> dict:
        return {"id": self.id, "object": "file", "bytes": self.bytes, "created_at": self.created_at,
                "filename": self.filename, "purpose": self.purpose, "status": "processed",
                "expires_at": self.expires_at, "status_details": None}


def checked_expires_after(value: object, param: str) -> int:
    """The seconds of an `expires_after` policy ({"anchor": "created_at", "seconds": N},
    N from an hour to 30 days), else a 400 naming `param`."""
    seconds = value.get("seconds") if isinstance(value, dict) else None
    if (not isinstance(value, dict) or value.get("anchor") != "created_at" or set(value) != {"anchor", "seconds"}
            or type(seconds) is not int or not MIN_EXPIRY_S <= seconds <= MAX_EXPIRY_S):
        raise invalid_request(f"'{param}' must be {{\"anchor\": \"created_at\", \"seconds\": N}} with N from "
                              f"{MIN_EXPIRY_S} to {MAX_EXPIRY_S}.", param=param, code="invalid_value")
    return seconds
