"""S-8: `manage.py receipts verify|replay` exit codes and output."""

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from receipts import store
from receipts.models import Receipt as ReceiptRow

pytestmark = pytest.mark.django_db


def run(*args):
    out = StringIO()
    call_command("receipts", *args, stdout=out)
    return out.getvalue()


def test_verify_strict_passes_on_sound_chains():
    store.append("cmd/a", [{"type": "x"}, {"type": "y"}])
    store.append("cmd/b", {"type": "x"})
    output = json.loads(run("verify", "cmd/", "--strict", "--json"))
    assert output == {"ok": True, "checked": 2, "broken": [], "retention": []}


def test_verify_strict_fails_on_a_tampered_chain():
    store.append("cmd/c", [{"type": "x"}, {"type": "y"}])
    ReceiptRow.objects.filter(stream="cmd/c", stream_seq=2).update(body={"type": "evil"})
    with pytest.raises(CommandError) as caught:
        run("verify", "cmd/", "--strict")
    assert caught.value.returncode == 1
    # without --strict the problem is reported but the exit is clean
    text = run("verify", "cmd/c")
    assert "BROKEN cmd/c: hash mismatch at index 1" in text


def test_replay_refuses_a_tampered_stream():
    store.append("cmd/d", {"type": "x"})
    ReceiptRow.objects.filter(stream="cmd/d").update(body={"type": "evil"})
    with pytest.raises(CommandError, match="refused to replay invalid chain for stream 'cmd/d'"):
        run("replay", "cmd/d")


def test_replay_json_reports_checked_streams():
    store.append("cmd/e", {"type": "x"})
    output = json.loads(run("replay", "cmd/e", "--json"))
    assert output["ok"] and output["checked"] == 1 and output["drift"] == []


def test_verify_strict_fails_when_the_prefix_matches_no_stream():
    store.append("cmd/a", {"type": "x"})
    with pytest.raises(CommandError, match="no stream matches 'cdm/'") as caught:
        run("verify", "cdm/", "--strict")
    assert caught.value.returncode == 1
    # without --strict an empty match is reported, not an error
    assert "verified 0 stream(s), 0 broken" in run("verify", "cdm/")
