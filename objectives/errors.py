"""Errors of the objectives app: an API code, an HTTP status and a sentence with the ids."""

from __future__ import annotations

from receipts.core.errors import AppError


class ObjectivesError(AppError):
    code = "objectives_error"
    status = 409


class ObjectiveNotFound(ObjectivesError):
    code, status = "objective_not_found", 404

    def __init__(self, objective_id: str) -> None:
        super().__init__(f"objective {objective_id} not found")
        self.objective_id = objective_id


class InvalidAction(ObjectivesError):
    """A request that cannot apply (bad input or a wrong state); nothing was written."""

    status = 400

    def __init__(self, code: str, message: str, *, status: int = 400) -> None:
        super().__init__(message)
        self.code = code
        self.status = status


class ObjectiveContention(ObjectivesError):
    code, status = "objective_contention", 503

    def __init__(self, objective_id: str, attempts: int) -> None:
        super().__init__(
            f"objective {objective_id}: the head kept moving; gave up after "
            f"{attempts} compare-and-append attempts"
        )
