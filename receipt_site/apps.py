import gc

from django.apps import AppConfig


class ReceiptSiteConfig(AppConfig):
    name = "receipt_site"
    verbose_name = "Receipt site"

    def ready(self) -> None:
        # Everything loaded by now (Django, the apps, their models) lives as long as the
        # process. Left in the collected generations, every full collection walks it all
        # again: in a process that allocates a lot (a batch enqueue, a busy worker) that is
        # most of the collector's time and a slice of every request's. Frozen, it is
        # skipped; it also stays unwritten, so the workers django-q2 forks share its pages.
        gc.freeze()
