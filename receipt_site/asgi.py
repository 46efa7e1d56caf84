"""ASGI entry point: `python -m uvicorn receipt_site.asgi:application` (P-2).

Django's handler, except that live event streams hold no thread per client (jobs.live.asgi).
"""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "receipt_site.settings")

from jobs.live.asgi import get_asgi_application

application = get_asgi_application()
