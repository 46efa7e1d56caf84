"""ASGI entry point: `python -m uvicorn receipt_site.asgi:application` (P-2).

Django's handler, except that live event streams hold no thread per client (jobs.live.asgi).
"""

import os
import warnings

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "receipt_site.settings")
# Under ASGI each request's sync code may run on a fresh thread, so thread-local
# persistent connections would be reopened per request (~5 ms each on PostgreSQL).
# A connection pool is shared by every thread of the process.
os.environ.setdefault("RECEIPT_DB_POOL", "1")
from jobs.live.asgi import get_asgi_application

# Static files (WhiteNoise) are small, sync-iterated responses; Django warns about each under
# ASGI. Live event streams, the responses that matter here, are asynchronous.
warnings.filterwarnings(
    "ignore", message="StreamingHttpResponse must consume synchronous iterators"
)

application = get_asgi_application()
