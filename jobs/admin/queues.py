"""The Queues page: every worker group of the deployment, whether it is paused (by whom,
since when), and a pause or resume button per group. Each goes through `jobs.queues`
with `by = <admin username>`, which records it on the group's `queues/<group>` stream;
nothing here writes."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse

from jobs import queues
from jobs.errors import JobsError
from jobs.models import Queue
from receipts.admin_kit import OwnChangePage, require, stream_url, utc


@admin.register(Queue)
class QueueAdmin(OwnChangePage):
    """Viewing needs `jobs.view_queue`, pausing and resuming `jobs.change_queue`."""

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        require(self.has_view_permission(request))
        if request.method == "POST":
            return self._act(request)
        listed = queues.listing()
        # a group never paused has no stream yet: nothing to link to
        known = set(
            Queue.objects.filter(pk__in=[q["group"] for q in listed]).values_list("pk", flat=True)
        )
        rows = [
            {
                **q,
                "since": utc(q["pausedAt"]) if q["pausedAt"] else None,
                "history": stream_url(q["stream"]) if q["group"] in known else None,
            }
            for q in listed
        ]
        context = {
            "title": "Queues",
            "queues": rows,
            "can_change": self.has_change_permission(request),
        }
        return self.render_page(request, "admin/jobs/queue/queues.html", context, extra_context)

    def object_page(
        self, request: HttpRequest, group: str, extra_context: dict[str, Any] | None
    ) -> HttpResponse:
        """A queue's page is its stream: every pause and resume, with `by`."""
        return HttpResponseRedirect(stream_url(queues.stream_of(group)))

    def _act(self, request: HttpRequest) -> HttpResponse:
        require(self.has_change_permission(request))
        group, verb = request.POST.get("group", ""), request.POST.get("verb")
        by = request.user.get_username()
        try:
            if verb == "pause":
                queues.pause(group, by=by)
            elif verb == "resume":
                queues.resume(group, by=by)
            else:
                raise ValueError(f"unknown action {verb!r}")
        except (JobsError, ValueError) as error:
            self.message_user(request, f"Refused: {error}.", messages.ERROR)
        else:
            self.message_user(request, f"Queue {group} {verb}d by {by}.", messages.SUCCESS)
        return HttpResponseRedirect(reverse("admin:jobs_queue_changelist"))
