"""Where an HTTP enqueue's CPU goes, in one process and with no server: the layers of
`POST /agents/<agentId>/jobs` timed one inside the other (T-2).

    .venv/bin/python bench/http_cost.py [--database-url URL] [--n 2000] [--rounds 3]
    .venv/bin/python bench/http_cost.py --smoke     # 20 requests a layer, one round

- enqueue: `jobs.queue.enqueue` of the same payload, as a Python caller pays it;
- view steps: what the view does around it, called directly with no handler: the
  request built from its WSGI environ, the bearer token, the body parsed and checked, the
  options validated, the enqueue, the answer presented and rendered as JSON, and Django's
  request_started / request_finished (the connection checks);
- whole request: the same request through Django's WSGI handler (URL resolution, the
  middleware, DRF's dispatch: authentication, permission, negotiation, rendering).

CPU is this process's (process_time, every thread), per request; rounds alternate the
layers, and each figure is the median of its rounds. A server adds its own cost on top
(HTTP parsing, its threads): compare `bench/http_load.py`'s CPU per request. Empty tables
before every round. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import time
from collections.abc import Callable

import delivery
import smoke

PATH = "/agents/bench-noop/jobs"
PAYLOAD = {
    "kind": "factory.dispatch",
    "authContext": {"userId": "bench", "organizationId": "bench"},
}
WARM_UP = 50


def environ(secret: str, body: bytes) -> dict:
    return {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": PATH,
        "SCRIPT_NAME": "",
        "QUERY_STRING": "",
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "8000",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "HTTP_HOST": "127.0.0.1:8000",
        "HTTP_AUTHORIZATION": f"Bearer {secret}",
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(len(body)),
        "wsgi.input": io.BytesIO(body),
        "wsgi.url_scheme": "http",
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": False,
        "wsgi.run_once": False,
        "wsgi.version": (1, 0),
    }


def layers(secret: str) -> dict[str, Callable[[], None]]:
    from django.core import signals
    from django.core.handlers.wsgi import WSGIRequest
    from django.core.wsgi import get_wsgi_application
    from django.http import HttpResponse
    from rest_framework.renderers import JSONRenderer

    from access.principals import principal_for_request
    from jobs import queue
    from jobs.api import views

    application = get_wsgi_application()
    body = json.dumps(PAYLOAD).encode()
    renderer = JSONRenderer()

    def enqueue() -> None:
        queue.enqueue("bench-noop", PAYLOAD, by="token:bench-cost")

    def view_steps() -> None:
        signals.request_started.send(sender=None)
        request = WSGIRequest(environ(secret, body))
        principal = principal_for_request(request)
        assert principal is not None
        parsed = views.read_json_object(request)
        asked, warnings = views.enqueue_request("bench-noop", parsed, by=principal.name)
        answer = views.enqueue_json(views.enqueue_as(principal, asked), warnings)
        HttpResponse(renderer.render(answer), status=202).close()  # close: request_finished

    def whole_request() -> None:
        status: list[str] = []
        response = application(environ(secret, body), lambda s, h, e=None: status.append(s))
        b"".join(response)
        response.close()
        assert status[0].startswith("202"), status

    return {"enqueue": enqueue, "view_steps": view_steps, "whole_request": whole_request}


def cpu_us(call: Callable[[], None], n: int) -> float:
    delivery.reset()
    for _ in range(WARM_UP):
        call()
    started = time.process_time()
    for _ in range(n):
        call()
    return (time.process_time() - started) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--database-url", default="postgres://root@127.0.0.1:5432/receipt_bench")
    parser.add_argument("--n", type=int, default=2000, help="requests a layer, a round")
    parser.add_argument("--rounds", type=int, default=3)
    args = smoke.parse(parser, {"n": 20, "rounds": 1})
    os.environ.setdefault("RECEIPT_LOG_LEVEL", "WARNING")
    delivery.setup_django(args.database_url, "orm")
    from access.models import ApiToken

    _, secret = ApiToken.issue(name="bench-cost")
    timed = layers(secret)
    rounds: dict[str, list[float]] = {name: [] for name in timed}
    for _ in range(args.rounds):
        for name, call in timed.items():
            rounds[name].append(cpu_us(call, args.n))
    median = {name: statistics.median(values) for name, values in rounds.items()}
    print(
        json.dumps(
            {
                "test": "http_cost",
                "n": args.n,
                "rounds": args.rounds,
                **{f"{name}_cpu_us": round(value, 1) for name, value in median.items()},
                "view_steps_over_enqueue_us": round(median["view_steps"] - median["enqueue"], 1),
                "handler_over_view_steps_us": round(
                    median["whole_request"] - median["view_steps"], 1
                ),
                "all_rounds": {k: [round(v, 1) for v in vs] for k, vs in rounds.items()},
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
