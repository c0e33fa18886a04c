"""Each tenant's cap on the bytes of its stored files (`[server] file_bytes_per_tenant`).

Invariants:
- what counts is the bytes of the tenant's live files (uploads and the batch output and
  error files the gateway wrote; deleted and expired ones do not): one tenant's files
  never use another tenant's room;
- an upload that would bring its tenant past the cap is refused with
  `file_storage_full` (a 400 `file_storage_limit_exceeded`, in OpenAI's error shape),
  before its bytes are kept; a batch's output and error files are never refused (a
  finished batch's results are not lost), so they alone may take a tenant past its cap;
- the word of the file store is final: it checks the cap and records a file in one
  SQLite statement, so neither two uploads of one gateway nor two gateways on one
  directory pass the cap together. `UploadReservations` only lets the upload route refuse
  early, before a body is read and spooled, the uploads that the bytes its tenant holds
  and the bodies its other uploads are sending leave no room for;
- reservations live on the event loop only (asyncio runs one callback at a time): each
  upload's is released when its request ends, however it ends.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from gateway.errors import ApiError

DEFAULT_FILE_BYTES_PER_TENANT = 10 * 1024 ** 3
STORAGE_FULL_CODE = "file_storage_limit_exceeded"


def file_storage_full(cap: int, held: int, num_bytes: int | None, what: str = "this upload",
                      sending: int = 0) -> ApiError:
    """The 400 of `what` (an upload, or its body with the form's own bytes) of `num_bytes`
    (None: a body that went on past the room left) for a tenant whose files hold `held`
    bytes and whose other uploads in progress are `sending` more, under a cap of `cap`.
    OpenAI documents only the message of its own ("You have exceeded your file storage
    quota..."), no status or code: this is the 400 of a request that cannot be kept."""
    taken = held + sending
    others = f" and your other uploads in progress are sending {sending} more" if sending else ""
    upload = (f"{what} ({num_bytes} bytes) would bring them to {taken + num_bytes}" if num_bytes is not None
              else f"{what} is larger than the {max(cap - taken, 0)} bytes left")
    return ApiError(400, f"You have exceeded your file storage quota: a tenant may keep {cap} bytes of files "
                    f"(`[server] file_bytes_per_tenant`); yours hold {held} bytes{others}, and {upload}. Delete "
                    "files you no longer need (DELETE /v1/files/{file_id}) and upload it again.",
                    "invalid_request_error", STORAGE_FULL_CODE, "file")


@dataclass(slots=True)
class Reservation:
    """One upload's share of its tenant's reserved bytes: `others`, what the tenant's
    other uploads in progress had reserved when it began."""
    tenant: str
    num_bytes: int
    others: int


class UploadReservations:
    """The body bytes of each tenant's uploads in progress: what each declared
    (Content-Length), or, sent in chunks, what it has sent so far."""

    def __init__(self) -> None:
        self._bytes: dict[str, int] = {}

    def held(self, tenant: str) -> int:
        return self._bytes.get(tenant, 0)

    @contextmanager
    def reserving(self, tenant: str, num_bytes: int) -> Iterator[Reservation]:
        """Reserve `num_bytes` for `tenant` until the block ends."""
        reservation = Reservation(tenant, 0, self.held(tenant))
        self.grow(reservation, num_bytes)
        try:
            yield reservation
        finally:
            self._set(tenant, self.held(tenant) - reservation.num_bytes)

    def grow(self, reservation: Reservation, num_bytes: int) -> None:
        """Make `reservation` `num_bytes` when that is more than it holds."""
        if num_bytes > reservation.num_bytes:
            self._set(reservation.tenant, self.held(reservation.tenant) + num_bytes - reservation.num_bytes)
            reservation.num_bytes = num_bytes

    def _set(self, tenant: str, num_bytes: int) -> None:
        if num_bytes > 0:
            self._bytes[tenant] = num_bytes
        else:
            self._bytes.pop(tenant, None)
