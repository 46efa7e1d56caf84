"""The store-wide log over HTTP: checkpoints, inclusion and consistency proofs, and the
signing key's public half. Thin views over receipts.checkpoints and receipts.proofs;
each answer is the JSON file `python -m receipts.verify_offline` checks, as it is.

A job's receipts are proved through the job (`/jobs/<id>/receipts/<n>/inclusion`), so
the job's organization applies, pruned jobs included. `/log/inclusion` proves any
receipt of the store and is for credentials bound to no organization.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, serializers
from rest_framework.request import Request
from rest_framework.response import Response

from access.permissions import principal_of
from jobs import retention, selectors
from jobs.api import schema
from jobs.api.serializers import ErrorSerializer
from jobs.api.views import ApiView
from jobs.core.vocabulary import job_stream
from jobs.errors import InvalidRequest, JobNotFound
from receipts import checkpoints, proofs
from receipts.errors import NoSigningKey, ReceiptNotFound

MAX_POSITION = 2**53


class CheckpointSerializer(serializers.Serializer):
    format = serializers.CharField(help_text="receipt.checkpoint.v1")
    treeSize = serializers.IntegerField(help_text="leaves (receipts) in the log")
    rootHash = serializers.CharField(help_text="the tree's root hash, hex")
    timestampMs = serializers.IntegerField()
    previous = serializers.CharField(allow_null=True, help_text="the previous checkpoint's hash")
    keyId = serializers.CharField(allow_null=True, help_text="the signing key's id")
    signature = serializers.CharField(allow_null=True, help_text="Ed25519, base64")
    signed = serializers.BooleanField()


class InclusionSerializer(serializers.Serializer):
    format = serializers.CharField(help_text="receipt.inclusion.v1")
    leaf = serializers.CharField(help_text="the receipt's hash")
    index = serializers.IntegerField(help_text="its leaf index")
    treeSize = serializers.IntegerField()
    path = serializers.ListField(child=serializers.CharField(), help_text="the audit path")
    checkpoint = serializers.CharField(help_text="the checkpoint's hash")


class ConsistencySerializer(serializers.Serializer):
    format = serializers.CharField(help_text="receipt.consistency.v1")
    oldSize = serializers.IntegerField()
    newSize = serializers.IntegerField()
    path = serializers.ListField(child=serializers.CharField())
    old = serializers.CharField(help_text="the older checkpoint's hash")
    new = serializers.CharField(help_text="the newer checkpoint's hash")


class PublicKeySerializer(serializers.Serializer):
    keyId = serializers.CharField()
    publicKey = serializers.CharField(help_text="PEM (SubjectPublicKeyInfo)")


def _error(text: str) -> OpenApiResponse:
    return OpenApiResponse(ErrorSerializer, description=text)


_CHECKPOINT_PARAMETER = schema.query_parameter(
    "checkpoint", "`latest` (the default), a checkpoint number or a checkpoint hash"
)
_BAD_CHECKPOINT = "The checkpoint is named in no known form (invalid_reference), " + (
    "repeated_parameter, unknown_parameter."
)
_NO_CHECKPOINT = "No such checkpoint, or none made yet (checkpoint_not_found)."
_NOT_YET = "The receipt is not in the log or that checkpoint yet (not_in_checkpoint)."


def _checkpoint(request: Request, name: str = "checkpoint", default: str = "latest") -> Any:
    return checkpoints.resolve(request.query_params.get(name, default), field=name)


class CheckpointView(ApiView):
    required_scope = "jobs:read"
    query_parameters = ("checkpoint",)

    @extend_schema(
        operation_id="get_log_checkpoint",
        tags=["log"],
        summary="A checkpoint of the log",
        description="The latest signed checkpoint of the store-wide log (or the one "
        "asked for): keep it, and later check that the log still extends it.",
        parameters=[_CHECKPOINT_PARAMETER],
        responses={
            200: OpenApiResponse(CheckpointSerializer, description="the checkpoint"),
            **schema.errors(400, bad_request=_BAD_CHECKPOINT),
            404: _error(_NO_CHECKPOINT),
        },
    )
    def get(self, request: Request) -> Response:
        return Response(_checkpoint(request).to_wire())


class ConsistencyView(ApiView):
    required_scope = "jobs:read"
    query_parameters = ("old", "new")

    @extend_schema(
        operation_id="get_log_consistency",
        tags=["log"],
        summary="A consistency proof",
        description="The proof that the log at checkpoint `new` extends the log at "
        "checkpoint `old`: nothing before `old` was changed or removed.",
        parameters=[
            schema.query_parameter("old", "the older checkpoint: its number or hash (required)"),
            schema.query_parameter("new", "the newer checkpoint (default: latest)"),
        ],
        responses={
            200: OpenApiResponse(ConsistencySerializer, description="the proof"),
            **schema.errors(400, bad_request=_BAD_CHECKPOINT + " old is required."),
            404: _error(_NO_CHECKPOINT),
        },
    )
    def get(self, request: Request) -> Response:
        if "old" not in request.query_params:
            raise InvalidRequest("invalid_reference", "old: the older checkpoint is required")
        old, new = _checkpoint(request, "old"), _checkpoint(request, "new")
        return Response(proofs.consistency(old, new).to_wire())


class PublicKeyView(ApiView):
    required_scope = "jobs:read"

    @extend_schema(
        operation_id="get_log_public_key",
        tags=["log"],
        summary="The log's public key",
        description="The public half of the key checkpoints are signed with. Compare it "
        "with the one the operator gave you out of band.",
        responses={
            200: OpenApiResponse(PublicKeySerializer, description="the key"),
            **schema.errors(),
            404: _error("Checkpoints are unsigned here (no_signing_key)."),
        },
    )
    def get(self, request: Request) -> Response:
        from receipts import signing

        key = checkpoints.signing_key()
        if key is None:
            raise NoSigningKey("checkpoints are unsigned: no signing key is configured")
        pem = signing.public_key_pem(key).decode()
        return Response({"keyId": signing.key_id(key.public_key()), "publicKey": pem})


class LogInclusionView(ApiView):
    required_scope = "jobs:read"
    query_parameters = ("receipt", "checkpoint")

    @extend_schema(
        operation_id="get_log_inclusion",
        tags=["log"],
        summary="An inclusion proof of any receipt",
        description="The proof that a receipt of any stream is in a checkpoint. For "
        "credentials bound to no organization; a job's own receipts are proved at "
        "/jobs/{job_id}/receipts/{n}/inclusion.",
        parameters=[
            schema.query_parameter(
                "receipt", "the receipt: its hash, <stream>#<n> or its id (required)"
            ),
            _CHECKPOINT_PARAMETER,
        ],
        responses={
            200: OpenApiResponse(InclusionSerializer, description="the proof"),
            **schema.errors(400, bad_request=_BAD_CHECKPOINT + " receipt is required."),
            404: _error("No such receipt or checkpoint (receipt_not_found, checkpoint_not_found)."),
            409: _error(_NOT_YET),
        },
    )
    def get(self, request: Request) -> Response:
        if principal_of(request).organization_id is not None:
            raise exceptions.PermissionDenied(
                "this credential acts for one organization: prove its jobs' receipts at "
                "/jobs/<id>/receipts/<n>/inclusion",
                code="organization_forbidden",
            )
        ref = request.query_params.get("receipt")
        if not ref:
            raise InvalidRequest("invalid_reference", "receipt: the receipt to prove is required")
        located = proofs.locate(ref)
        return Response(proofs.inclusion(located, _checkpoint(request)).to_wire())


class JobReceiptInclusionView(ApiView):
    required_scope = "jobs:read"
    query_parameters = ("checkpoint",)

    @extend_schema(
        operation_id="get_job_receipt_inclusion",
        tags=["jobs"],
        summary="An inclusion proof of a job's receipt",
        description="The proof that receipt n (1, 2, ...) of the job is in a checkpoint "
        "of the store-wide log, also after retention removed the job.",
        parameters=[
            schema.JOB_ID,
            schema.path_parameter("n", "the receipt's position on the job's stream", r"^[0-9]+$"),
            _CHECKPOINT_PARAMETER,
        ],
        responses={
            200: OpenApiResponse(InclusionSerializer, description="the proof"),
            **schema.errors(400, bad_request=_BAD_CHECKPOINT),
            404: _error(
                "No such job, receipt or checkpoint (job_not_found, "
                "receipt_not_found, checkpoint_not_found)."
            ),
            409: _error(_NOT_YET),
        },
    )
    def get(self, request: Request, job_id: str, n: str) -> Response:
        principal = principal_of(request)
        try:
            selectors.visible_job_or_404(principal, job_id)
        except JobNotFound:
            if retention.pruned(job_id, may_see=principal.may_see) is None:
                raise
        position = int(n) if n.isascii() and n.isdigit() and len(n) < 16 else 0
        if not 1 <= position <= MAX_POSITION:
            raise ReceiptNotFound(f"no receipt {job_stream(job_id)}#{n[:20]}")
        located = proofs.locate_position(job_stream(job_id), position)
        return Response(proofs.inclusion(located, _checkpoint(request)).to_wire())
