import gc

from django.apps import AppConfig
from django.conf import settings


class ReceiptSiteConfig(AppConfig):
    name = "receipt_site"
    verbose_name = "Receipt site"

    def __init__(self, app_name: str, app_module: object) -> None:
        super().__init__(app_name, app_module)
        # Django creates the app configs in INSTALLED_APPS order, before importing any
        # model: a host project's RECEIPT block becomes the typed config, and Q_CLUSTER is
        # derived, before django_q (listed after this app) reads it at import.
        from receipt_site import conf

        conf.configure(settings)

    def ready(self) -> None:
        from django.db.backends.signals import connection_created

        from receipt_site import checks, databases

        checks.register()
        # A host project's SQLite database gets Receipt's connection set-up too (WAL,
        # busy timeout, IMMEDIATE transactions), wherever its settings leave it unset.
        connection_created.connect(databases.prepare_sqlite, dispatch_uid="receipt.sqlite")
        # Everything loaded by now (Django, the apps, their models) lives as long as the
        # process. Left in the collected generations, every full collection walks it all
        # again: in a process that allocates a lot (a batch enqueue, a busy worker) that is
        # most of the collector's time and a slice of every request's. Frozen, it is
        # skipped; it also stays unwritten, so the workers django-q2 forks share its pages.
        gc.freeze()
