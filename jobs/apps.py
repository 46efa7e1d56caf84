from django.apps import AppConfig, apps


class JobsConfig(AppConfig):
    name = "jobs"
    verbose_name = "Jobs"
    default_auto_field = "django.db.models.BigAutoField"

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
        if metrics.count_auth_failure not in failures.observers:
            failures.observers.append(metrics.count_auth_failure)  # /metrics, issue 31
        if counters.observe_append not in store.append_observers:
            store.append_observers.append(counters.observe_append)  # /metrics append latency
        receipt_retention.pruners["jobs"] = retention.prune  # `receipts prune`
        if retention.check not in receipt_retention.checks:
            receipt_retention.checks.append(retention.check)  # `receipts verify`
        if due.send_executes not in limits.on_woken:
            limits.on_woken.append(due.send_executes)  # a freed slot's held delivery
        if dispatch.dispatch_created not in queue.on_commit_listeners:
            queue.on_commit_listeners.append(dispatch.dispatch_created)  # D-2
        if not queue.joined_dispatch:
            queue.joined_dispatch.append(dispatch.joined_promises)
        if redelivery.loops not in loops.providers:
            loops.providers.append(redelivery.loops)  # Redis: re-push what Redis lost
        task_handler.register_if_configured()  # Django's task framework: agent django-task
        if schedules.loops not in loops.providers:
            loops.providers.append(schedules.loops)  # every runworker fires due ticks
        if store_log.loops not in loops.providers:
            loops.providers.append(store_log.loops)  # the store-wide log and its checkpoints
