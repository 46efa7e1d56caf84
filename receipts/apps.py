from django.apps import AppConfig


class ReceiptsConfig(AppConfig):
    name = "receipts"
    verbose_name = "Receipts (append-only store)"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # canonical JSON's fast writer (orjson) is installed from outside the pure core
        from receipts import wire_json  # noqa: F401
