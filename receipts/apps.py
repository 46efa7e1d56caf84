from django.apps import AppConfig


class ReceiptsConfig(AppConfig):
    name = "receipts"
    verbose_name = "Receipts (append-only store)"
    default_auto_field = "django.db.models.BigAutoField"
