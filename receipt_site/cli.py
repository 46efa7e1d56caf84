"""The `receipt` command: Django's management commands for an installed Receipt, from any
directory (`receipt migrate`, `receipt runworker --role chat`, `receipt runstack`).

`python manage.py ...` in a checkout is the same thing.
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str] | None = None) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "receipt_site.settings")
    from django.core.management import execute_from_command_line

    from jobs.runtime.roles import preset_cluster_name

    args = sys.argv[1:] if argv is None else argv
    preset_cluster_name(["receipt", *args], os.environ)
    execute_from_command_line(["receipt", *args])


if __name__ == "__main__":
    main()
