"""ASGI entry point: `python -m uvicorn receipt_site.asgi:application` (P-2)."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "receipt_site.settings")
application = get_asgi_application()
