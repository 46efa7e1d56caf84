"""GET /limits: each declared rate limit and concurrency cap and how full it is
(`jobs.limits`). A credential bound to an organization sees the limits and their totals,
not the busiest keys: a key is another customer's value."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from access.permissions import principal_of
from jobs import limits
from jobs.api import schema
from jobs.api.views import ApiView
from receipts.clock import now_ms as wall_clock_ms


class RateUseSerializer(serializers.Serializer):
    text = serializers.CharField(help_text="starts per period, e.g. 60/m or 5/10s")
    used = serializers.IntegerField(help_text="starts in the current window")
    of = serializers.IntegerField(help_text="starts a window allows")
    held = serializers.IntegerField(help_text="deliveries held until the window has room")


class KeyUseSerializer(serializers.Serializer):
    key = serializers.CharField(allow_null=True, help_text="the key's value; null without one")
    running = serializers.IntegerField()
    full = serializers.BooleanField()


class CapUseSerializer(serializers.Serializer):
    of = serializers.IntegerField(help_text="jobs running at once, per key when it has one")
    key = serializers.CharField(allow_null=True, help_text="payload path or task argument")
    busiest = KeyUseSerializer(many=True, help_text="the busiest keys (not for org credentials)")
    held = serializers.IntegerField(help_text="deliveries held until a slot of their key frees")


class LimitSerializer(serializers.Serializer):
    name = serializers.CharField()
    kinds = serializers.ListField(child=serializers.CharField(), help_text="kinds or task paths")
    queues = serializers.ListField(child=serializers.CharField(), help_text="worker groups")
    covers = serializers.CharField()
    rate = RateUseSerializer(required=False)
    concurrency = CapUseSerializer(required=False)


class LimitListSerializer(serializers.Serializer):
    limits = LimitSerializer(many=True)


class LimitListView(ApiView):
    required_scope = "jobs:read"

    @extend_schema(
        operation_id="list_limits",
        tags=["queues"],
        summary="List limits",
        description="Every rate limit and concurrency cap, as declared (RECEIPT_LIMITS or "
        "code), with its use now: starts in the current window, the busiest keys of a cap, "
        "and how many deliveries each holds back (counted up to 1,000).",
        responses={
            200: OpenApiResponse(LimitListSerializer, description="every declared limit"),
            **schema.errors(),
        },
    )
    def get(self, request: Request) -> Response:
        bound = principal_of(request).organization_id is not None
        now = wall_clock_ms()
        shown = []
        for limit in limits.declared():
            use = limits.usage(limit, now_ms=now)
            if bound and "concurrency" in use:
                use["concurrency"]["busiest"] = []
            shown.append({**use, "kinds": list(limit.kinds), "queues": list(limit.queues)})
        return Response({"limits": shown})
