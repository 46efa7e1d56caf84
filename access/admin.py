"""Operator admin for API tokens (A-10, Q-1): issue (the secret is shown once), scope,
revoke. Scopes are checkboxes of the known scopes, so an unknown scope is a form error
(Q-3), never a 500."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages

from access import tokens
from access.models import ApiToken


class ApiTokenForm(forms.ModelForm):
    scopes = forms.MultipleChoiceField(
        choices=[(scope, scope) for scope in tokens.SCOPES],
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="none ticked: every scope",
    )

    class Meta:
        model = ApiToken
        fields = ("name", "organization_id", "scopes", "revoked_at")

    def clean_scopes(self) -> list[str]:
        # The choices have refused unknown scopes already; this orders them and makes
        # "none ticked" every scope, as `createtoken` does.
        return tokens.parse_scopes(self.cleaned_data.get("scopes") or None)


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    form = ApiTokenForm
    list_display = (
        "name",
        "prefix",
        "organization_id",
        "scope_list",
        "created_at",
        "last_used_at",
        "revoked_at",
    )
    readonly_fields = ("prefix", "digest", "created_at", "created_by", "last_used_at")
    fields = (
        "name",
        "organization_id",
        "scopes",
        "prefix",
        "digest",
        "created_at",
        "created_by",
        "last_used_at",
        "revoked_at",
    )
    search_fields = ("name", "prefix", "organization_id")

    @admin.display(description="scopes")
    def scope_list(self, obj: ApiToken) -> str:
        return ", ".join(obj.scopes or [])

    def save_model(self, request: Any, obj: ApiToken, form: Any, change: bool) -> None:
        if change:
            return super().save_model(request, obj, form, change)
        token, secret = ApiToken.issue(
            name=obj.name,
            organization_id=obj.organization_id,
            scopes=obj.scopes or None,
            created_by=request.user,
        )
        obj.pk = token.pk
        messages.warning(request, f"Token created. Copy it now, it is not shown again: {secret}")
