from django.apps import AppConfig


class ReceiptSiteConfig(AppConfig):
    name = "receipt_site"
    verbose_name = "Receipt site"
