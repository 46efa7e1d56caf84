"""`manage.py runstack`: the API and every worker role as supervised children (P-3):
the driver, the built-in worker groups and every group the deployment declares."""

from __future__ import annotations

import sys
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from jobs.core.timing import TimingSettings
from jobs.runtime.roles import role_names
from receipt_site import ports
from receipt_site.supervision import STATUS_FILE, Child, Supervisor


class Command(BaseCommand):
    help = "Run the API and all worker roles for development, restarting crashed children."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--no-api", action="store_true")

    def handle(self, *args, host: str, port: int, no_api: bool, **options):
        python = sys.executable
        children = []
        if not no_api:
            # Refused here rather than by uvicorn, which would exit and be restarted forever.
            taken = ports.why_taken(host, port)
            if taken is not None:
                raise CommandError(ports.refusal(host, port, taken, hint="--port {port}"))
            children.append(
                Child(
                    "api",
                    [
                        python,
                        "-m",
                        "uvicorn",
                        "receipt_site.asgi:application",
                        "--host",
                        host,
                        "--port",
                        str(port),
                        "--no-access-log",
                        "--lifespan",
                        "off",
                    ],
                    env={"RECEIPT_PROCESS_ROLE": "api"},
                )
            )
        roles = role_names(TimingSettings.from_config(settings.RECEIPT))
        for role in roles:  # the installed command, so any working directory will do
            children.append(
                Child(role, [python, "-m", "receipt_site.cli", "runworker", "--role", role])
            )
        status = Path(settings.RECEIPT.data_dir) / STATUS_FILE  # what /healthz reads
        raise SystemExit(Supervisor(children, status_path=status).run())
