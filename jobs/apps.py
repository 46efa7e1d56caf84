from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "jobs"
    verbose_name = "Jobs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from jobs import projector, queue
        from jobs.runtime import dispatch

        projector.register()
        if dispatch.dispatch_created not in queue.on_commit_listeners:
            queue.on_commit_listeners.append(dispatch.dispatch_created)  # D-2
