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
