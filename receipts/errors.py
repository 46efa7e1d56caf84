"""Errors of the receipt store; each carries an API code and a sentence with the ids in it."""

from receipts.core.errors import AppError


class ReceiptsError(AppError):
    code = "receipts_error"
    status = 409


class ExpectedPrevMismatch(ReceiptsError):
    code = "expected_prev_mismatch"

    def __init__(self, expected: str | None, head: str | None) -> None:
        super().__init__(f"Expected prev hash {expected} but head is {head}")
        self.expected = expected
        self.head = head


class InvalidEvent(ReceiptsError):
    code, status = "invalid_event", 400


class PartialEventIds(ReceiptsError):
    code = "partial_event_ids"


class ReplayRefused(ReceiptsError):
    code = "replay_refused"

    def __init__(self, stream: str, reason: str, index: int | None) -> None:
        where = "" if index is None else f" at index {index}"  # None: the stream as a whole
        super().__init__(f"refused to replay invalid chain for stream '{stream}': {reason}{where}")
        self.stream = stream


class CheckpointNotFound(ReceiptsError):
    code, status = "checkpoint_not_found", 404


class ReceiptNotFound(ReceiptsError):
    code, status = "receipt_not_found", 404


class NotInCheckpoint(ReceiptsError):
    """A receipt (or a checkpoint) the log or the checkpoint asked for does not cover yet."""

    code, status = "not_in_checkpoint", 409


class InvalidReference(ReceiptsError):
    """A receipt or checkpoint named in a form nothing can be found by; names the field."""

    code, status = "invalid_reference", 400


class CheckpointKeyError(ReceiptsError):
    """The signing key the settings name cannot be used: checkpoints are not made
    unsigned instead, so that nobody mistakes a broken key for no key."""

    code, status = "checkpoint_key_error", 500


class NoSigningKey(ReceiptsError):
    code, status = "no_signing_key", 404
