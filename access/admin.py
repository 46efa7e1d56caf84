from django.contrib import admin, messages

from access.models import ApiToken


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ("name", "prefix", "organization_id", "scope_list", "created_at",
                    "last_used_at", "revoked_at")
    readonly_fields = ("prefix", "digest", "created_at", "created_by", "last_used_at")
    fields = ("name", "organization_id", "scopes", "prefix", "digest", "created_at",
              "created_by", "last_used_at", "revoked_at")
    search_fields = ("name", "prefix", "organization_id")

    @admin.display(description="scopes")
    def scope_list(self, obj: ApiToken) -> str:
        return ", ".join(obj.scopes or [])

    def save_model(self, request, obj, form, change):
        if change:
            return super().save_model(request, obj, form, change)
        token, secret = ApiToken.issue(name=obj.name, organization_id=obj.organization_id,
                                       scopes=obj.scopes or None, created_by=request.user)
        obj.pk = token.pk
        messages.warning(request, f"Token created. Copy it now, it is not shown again: {secret}")
