from __future__ import annotations

from django.conf import settings
from django.db import models

from access import tokens


class ApiToken(models.Model):
    """A bearer token for the API; only its digest is stored (Q-1)."""

    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, help_text="first characters, to recognise a token")
    digest = models.CharField(max_length=64, unique=True)
    organization_id = models.CharField(
        max_length=128,
        null=True,
        blank=True,
        help_text="when set, the token only sees and writes this organization's jobs",
    )
    scopes = models.JSONField(default=list)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "access_api_token"
        # Granted to staff users in the admin; see access.principals.SCOPE_PERMISSIONS.
        permissions = [
            (
                "enqueue_for_any_organization",
                "Can enqueue jobs for any organization through the API with a staff session",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @classmethod
    def issue(
        cls,
        *,
        name: str,
        organization_id: str | None = None,
        scopes: list[str] | None = None,
        created_by=None,
    ) -> tuple[ApiToken, str]:
        """Create a token; returns the row and the secret, which is never stored."""
        secret = tokens.new_secret()
        token = cls.objects.create(
            name=name,
            prefix=secret[: tokens.PUBLIC_PREFIX],
            digest=tokens.digest(secret),
            organization_id=organization_id or None,
            scopes=tokens.parse_scopes(scopes),
            created_by=created_by,
        )
        return token, secret

    def has_scope(self, scope: str) -> bool:
        return scope in (self.scopes or [])
