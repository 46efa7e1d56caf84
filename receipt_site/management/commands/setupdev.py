"""`manage.py setupdev`: the embedded default's first-run setup (P-1).

Migrates, creates the `admin` superuser (password kept in RECEIPT_DATA_DIR/admin-password,
0600) and one development API token (RECEIPT_DATA_DIR/api-token), idempotently, and
prints where to go.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand

from access.models import ApiToken
from jobs.runtime import sandbox


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text + "\n")


class Command(BaseCommand):
    help = "Migrate and create the development admin user and API token (idempotent)."

    def add_arguments(self, parser):
        parser.add_argument("--url", default="http://127.0.0.1:8000")

    def handle(self, *args, url: str, **options):
        call_command("migrate", verbosity=0, interactive=False)
        data_dir = Path(settings.RECEIPT.data_dir)
        password_file = data_dir / "admin-password"
        token_file = data_dir / "api-token"
        users = get_user_model()
        if not users.objects.filter(username="admin").exists():
            password = secrets.token_urlsafe(12)
            users.objects.create_superuser("admin", "admin@localhost", password)
            _write_private(password_file, password)
        if not token_file.exists():
            _, secret = ApiToken.issue(name="development")
            _write_private(token_file, secret)
        password = password_file.read_text().strip() if password_file.exists() else "(unchanged)"
        token = token_file.read_text().strip()
        commands = sandbox.problem() or sandbox.warning() or "sandboxed (bubblewrap)"
        self.stdout.write(
            "\n".join(
                [
                    "",
                    "Receipt is ready.",
                    f"  admin:     {url}/admin/   user admin, password {password}",
                    f"  API token: {token}",
                    f"  try:       curl -H 'Authorization: Bearer {token}' {url}/healthz",
                    f"  data:      {data_dir}",
                    f"  commands:  {commands}",
                    "",
                ]
            )
        )
