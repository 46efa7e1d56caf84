from django.apps import AppConfig


class ObjectivesConfig(AppConfig):
    name = "objectives"
    verbose_name = "Factory (objectives)"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from jobs import queue, retention
        from jobs.apps import add_once
        from jobs.runtime import loops
        from objectives import handlers, job_page, ledger, listeners, projector, runtime
        from objectives.selectors import unsettled_objective_of_job

        projector.register()
        job_page.register()  # the admin job page's objective links and ledger (U-2, W-3)
        handlers.register()  # the four built-in agent ids (K-4)
        for listener in (ledger.on_job_mutation, listeners.on_job_mutation):
            add_once(queue.mutation_listeners, listener)  # W-3, O-8 (after commit)
        add_once(retention.holds, unsettled_objective_of_job)  # its jobs outlive retention
        add_once(loops.providers, runtime.role_loops)  # L-3, L-4 seeding, L-5
