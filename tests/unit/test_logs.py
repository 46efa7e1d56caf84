"""X-1: one JSON object per line, secrets redacted, long strings clipped."""

import json
import logging

from observability.logs import JsonFormatter, redact


def record(message, **extra):
    rec = logging.LogRecord("receipt.test", logging.WARNING, __file__, 1, message, None, None)
    for key, value in extra.items():
        setattr(rec, key, value)
    return rec


def test_line_has_the_contract_fields_and_context():
    line = json.loads(
        JsonFormatter().format(record("hello", event="runtime.configured", role="api"))
    )
    assert line["level"] == "warning" and line["service"] == "receipt"
    assert line["event"] == "runtime.configured" and line["message"] == "hello"
    assert line["role"] == "api" and isinstance(line["ts"], int)


def test_sensitive_keys_are_redacted_at_any_depth():
    line = json.loads(
        JsonFormatter().format(
            record(
                "x",
                event="e",
                headers={"Authorization": "Bearer abc", "Accept": "json"},
                api_key="k",
                password="p",
                nested={"sessionId": "s", "ok": 1},
            )
        )
    )
    assert line["headers"] == {"Authorization": "[redacted]", "Accept": "json"}
    assert line["api_key"] == "[redacted]" and line["password"] == "[redacted]"
    assert line["nested"] == {"sessionId": "[redacted]", "ok": 1}


def test_long_strings_are_clipped_to_2000_chars():
    clipped = redact({"out": "x" * 5000})["out"]
    assert len(clipped) == 2001 and clipped.endswith("…")


def test_tracebacks_keep_their_last_lines():
    try:
        raise ValueError("x" * 3000)
    except ValueError:
        import sys

        rec = record("boom", event="e")
        rec.exc_info = sys.exc_info()
    line = json.loads(JsonFormatter().format(rec))
    assert line["exception"].rstrip().endswith("x" * 100)  # the failing line is not clipped


def test_an_event_logged_with_its_exception_carries_the_traceback(caplog):
    from observability.logs import log_event

    logger = logging.getLogger("receipt.test")
    try:
        raise ValueError("the pass broke")
    except ValueError:
        log_event(logger, "loop.x_error", "x failed", level=logging.ERROR, loop="x", exc_info=True)
    [logged] = caplog.records
    assert (logged.event, logged.loop) == ("loop.x_error", "x")
    assert logged.exc_info is not None and logged.exc_info[0] is ValueError
    line = json.loads(JsonFormatter().format(logged))
    assert "the pass broke" in json.dumps(line)
