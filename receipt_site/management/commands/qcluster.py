"""`manage.py qcluster`, refused: django-q2's own command would start one cluster under
the site's default name, which takes none of Receipt's work (each role's cluster has its
own name and settings, started by `runworker`). Found before django_q's command because
`receipt_site` comes first in INSTALLED_APPS."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = "Not used with Receipt: run `manage.py runworker --role <role>` instead."
    requires_system_checks: list[str] = []

    def add_arguments(self, parser):  # django-q2's own, so they get this answer too
        parser.add_argument("--run-once", action="store_true")
        parser.add_argument("-n", "--name")

    def handle(self, *args, **options):
        raise CommandError(
            "Receipt runs its django-q2 clusters itself: start `manage.py runworker --role "
            "driver` and one runworker per worker group (--role chat runs Django tasks and "
            "most jobs), or `manage.py runstack --no-api` for all of them. A qcluster would "
            "take none of Receipt's work."
        )
