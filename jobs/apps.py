from collections.abc import Iterable
from typing import Any

from django.apps import AppConfig, apps
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

SITE_APP = "receipt_site"  # turns the RECEIPT block into the typed config (receipt_site.conf)


def add_once(registry: list[Any], entry: Any) -> None:
    """Add `entry` to an app's hook list unless it is there: `ready()` may run again."""
    if entry not in registry:
        registry.append(entry)


def require_site_app(installed: Iterable[str]) -> None:
    """ImproperlyConfigured unless INSTALLED_APPS lists receipt_site, the app whose
    creation makes a host's RECEIPT block the typed config everything reads."""
    if any(entry == SITE_APP or entry.startswith(f"{SITE_APP}.apps.") for entry in installed):
        return
    raise ImproperlyConfigured(
        f"{SITE_APP!r} is not in INSTALLED_APPS, so Receipt's settings are never read "
        f"(settings.RECEIPT stays as written): add {SITE_APP!r} to INSTALLED_APPS, above "
        "'django_q' (README, 'Add Receipt to your project')"
    )


class JobsConfig(AppConfig):
    name = "jobs"
    verbose_name = "Jobs"
    default_auto_field = "django.db.models.BigAutoField"

    def __init__(self, app_name: str, app_module: Any) -> None:
        super().__init__(app_name, app_module)
        # Django creates every app config before it imports any model, and the first read
        # of settings.RECEIPT comes after (a `@task` builds the task backend, which asks
        # for the worker groups): without receipt_site that read met the raw dict, deep
        # in the timing settings. Named here instead, before anything reads it.
        require_site_app(settings.INSTALLED_APPS)

    def ready(self) -> None:
        from access import failures
        from jobs import (  # noqa: F401
            limits,
            metrics,
            projector,
            queue,
            queues,
            retention,
            routing_checks,
            schedule_projector,
            schedules,
        )
        from jobs.core import contracts
        from jobs.runtime import counters, dispatch, due, loops, redelivery, store_log
        from jobs.tasks import handler as task_handler
        from receipts import retention as receipt_retention
        from receipts import store

        projector.register()
        contracts.offer_factory_kinds(apps.is_installed("objectives"))  # Factory is optional
        schedule_projector.register()  # schedules/<name> (issue 34)
        queues.register()  # queues/<group>: pausing a worker group (issue 34)
        add_once(failures.observers, metrics.count_auth_failure)  # /metrics, issue 31
        add_once(store.append_observers, counters.observe_append)  # /metrics append latency
        receipt_retention.pruners["jobs"] = retention.prune  # `receipts prune`
        add_once(receipt_retention.checks, retention.check)  # `receipts verify`
        add_once(limits.on_woken, due.send_executes)  # a freed slot's held delivery
        add_once(queue.on_commit_listeners, dispatch.dispatch_created)  # D-2
        if not queue.joined_dispatch:
            queue.joined_dispatch.append(dispatch.joined_promises)
        add_once(loops.providers, redelivery.loops)  # Redis: re-push what Redis lost
        task_handler.register_if_configured()  # Django's task framework: agent django-task
        add_once(loops.providers, schedules.loops)  # every runworker fires due ticks
        add_once(loops.providers, store_log.loops)  # the store-wide log and its checkpoints
