"""What an authenticated principal may do (A-10, Q-2): scopes and organization isolation.

`HasScope` guards DRF views by the scope each view names; `require_organization` keeps
an organization-bound principal to its own organization. Which jobs a principal may see
is the jobs app's to say (`jobs.selectors.visible_job_or_404`).
"""

from __future__ import annotations

from typing import Any

from rest_framework import exceptions
from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from access.principals import Principal


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
            "credentials are required: send Authorization: Bearer <token>"
        )
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
            code="organization_forbidden",
        )


def require_organization(principal: Principal, organization_id: str | None) -> None:
    """An organization-bound principal may only write for its own organization (A-10)."""
    if not principal.may_see(organization_id):
        raise OrganizationForbidden(principal, organization_id)
