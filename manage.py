#!/usr/bin/env python
import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "receipt_site.settings")
    from django.core.management import execute_from_command_line

    from jobs.runtime.roles import preset_cluster_name

    preset_cluster_name(sys.argv, os.environ)

    execute_from_command_line(sys.argv)
