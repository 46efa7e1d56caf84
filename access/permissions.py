"""What an authenticated principal may do (A-10, Q-2): scopes and organization isolation.

`HasScope` guards DRF views by the scope each view names; `visible_job_or_404` is the one
way any API path (detail, receipts, state, commands, live events) turns a job id into a
job the caller may see. A job of another organization is reported exactly like a
missing one (404 `job_not_found`), never 403, so ids cannot be probed across
organizations.
"""

from __future__ import annotations

from typing import Any

from rest_framework import exceptions
from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from access.principals import Principal
from jobs import queue
from jobs.core.reducer import JobState
from jobs.core.vocabulary import validate_job_id
from jobs.errors import JobNotFound


class MissingScope(exceptions.PermissionDenied):
    default_code = "missing_scope"

    def __init__(self, scope: str) -> None:
        super().__init__(f"this credential lacks the {scope} scope", code="missing_scope")
        self.scope = scope


def principal_of(request: Request) -> Principal:
    """The request's principal; raises NotAuthenticated (401) when there is none."""
    user = getattr(request, "user", None)
    if not isinstance(user, Principal):
        raise exceptions.NotAuthenticated(
            "credentials are required: send Authorization: Bearer <token>")
    return user


def require_scope(principal: Principal, scope: str) -> None:
    if not principal.has_scope(scope):
        raise MissingScope(scope)


class HasScope(BasePermission):
    """Needs a principal holding `view.required_scope` (None: any principal)."""

    def has_permission(self, request: Request, view: Any) -> bool:
        principal = principal_of(request)
        scope = getattr(view, "required_scope", None)
        if scope is not None:
            require_scope(principal, scope)
        return True


class IsPrincipal(BasePermission):
    """Any authenticated principal (the schema and its docs page)."""

    def has_permission(self, request: Request, view: Any) -> bool:
        principal_of(request)
        return True


class OrganizationForbidden(exceptions.PermissionDenied):
    default_code = "organization_forbidden"

    def __init__(self, principal: Principal, organization_id: str | None) -> None:
        super().__init__(
            f"this credential acts for organization {principal.organization_id} only; "
            f"payload.authContext.organizationId is {organization_id!r}",
            code="organization_forbidden")


def require_organization(principal: Principal, organization_id: str | None) -> None:
    """An organization-bound principal may only write for its own organization (A-10)."""
    if not principal.may_see(organization_id):
        raise OrganizationForbidden(principal, organization_id)


def visible_job_or_404(principal: Principal, job_id: str) -> JobState:
    """The job if `principal` may see it; JobNotFound (404 `job_not_found`) otherwise (Q-2).

    An id that could never name a job is not found either, so no bad id reaches a query.
    """
    try:
        validate_job_id(job_id)
    except (ValueError, TypeError):
        raise JobNotFound(str(job_id)[:200]) from None
    job = queue.get(job_id)
    if job is None or not principal.may_see(job.organization_id):
        raise JobNotFound(job_id)
    return job
