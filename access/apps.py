import logging

from django.apps import AppConfig
from django.db.models.signals import post_delete, post_save


class AccessConfig(AppConfig):
    name = "access"
    verbose_name = "API access"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from access import failures
        from access.models import ApiToken

        # A refused token is logged once, by access.failures, with what to alert on.
        request_log = logging.getLogger("django.request")
        if failures.not_reported_here not in request_log.filters:
            request_log.addFilter(failures.not_reported_here)

        # A revoked, re-scoped or deleted token stops working in this process at once;
        # other processes reread it within principals.TOKEN_CACHE_S (T-2).
        for signal in (post_save, post_delete):
            signal.connect(_forget_tokens, sender=ApiToken, dispatch_uid="access.forget_tokens")


def _forget_tokens(**_kwargs: object) -> None:
    from access import principals

    principals.forget_tokens()
