"""Kinds of a deployment's own worker group (issue 33 item 5), loaded beside
`tests.runtime.handlers` by the runworkers of the test that declares the group only: a
kind on an undeclared group is a configuration error (system check jobs.E001)."""

from __future__ import annotations

from jobs.handlers import register_kind

MAIL_GROUP = "mail-out"
register_kind("test.mail", worker_group=MAIL_GROUP, auth_context_required=False)
register_kind("test.note", auth_context_required=False)  # chat, unless a queue says otherwise
