"""What the process loads at startup is frozen out of the cyclic collector's walks
(receipt_site.apps): a full collection in a busy worker or a batch enqueue walks only what
the process made since, not Django, the apps and their models again and again."""

from __future__ import annotations

import gc

from jobs.models import Job
from jobs.queue import enqueue_many


def _tracked(obj: object) -> bool:
    return any(candidate is obj for candidate in gc.get_objects())


def test_startup_objects_are_not_walked_by_the_collector() -> None:
    assert gc.get_freeze_count() > 0
    assert not _tracked(Job)  # a model class, loaded with the apps
    assert not _tracked(enqueue_many)  # a module function, imported at startup


def test_objects_made_afterwards_are_still_collected() -> None:
    made: list[object] = []
    made.append(made)  # a cycle: only the collector frees it
    assert _tracked(made)
