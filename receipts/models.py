"""Tables of the append-only store (S-3). Only `receipts.store` writes them."""

from __future__ import annotations

from typing import Any

from django.db import models

from receipts.json_text import JSONTextField


class NameField(models.CharField):
    """A stream name, receipt id or hash: text compared byte by byte on PostgreSQL
    (collation "C"), as SQLite does. The store's indexes lead with these columns and
    every append compares its keys against theirs: a byte comparison costs a fraction
    of the locale's collation, order them as any client would (by code point), and
    lets the primary key serve a prefix (`LIKE 'jobs/%'`) without an index of its own."""

    def db_parameters(self, connection: Any) -> dict[str, Any]:
        parameters = super().db_parameters(connection)
        if connection.vendor == "postgresql":
            parameters["collation"] = "C"
        return parameters


class Stream(models.Model):
    name = NameField(max_length=255, primary_key=True)
    head = NameField(max_length=64, null=True)
    receipt_count = models.BigIntegerField(default=0)
    last_ts = models.BigIntegerField(null=True)
    # ms since epoch; not indexed, so moving the head stays a heap-only (HOT) update
    updated_at = models.BigIntegerField(default=0)

    class Meta:
        db_table = "receipt_stream"
        # Operator actions on the stream page (U-4, U-7); superusers hold them implicitly.
        permissions = [
            ("replay_stream", "Can replay a stream's read model"),
            ("verify_stream", "Can verify a stream"),
        ]

    def __str__(self) -> str:
        return self.name


class Receipt(models.Model):
    seq = models.BigAutoField(primary_key=True)  # global sequence (SSE ids, resume)
    stream = NameField(max_length=255)
    stream_seq = models.BigIntegerField()
    receipt_id = NameField(max_length=40)
    ts = models.BigIntegerField()
    prev = NameField(max_length=64, null=True)
    hash = NameField(max_length=64)
    event_type = models.CharField(max_length=100)
    # JSON columns for queries (`->`, `->>`), kept as text on PostgreSQL (`json`, see
    # receipts.json_text); rows from before 0007 hold what jsonb respelled (numbers).
    body = JSONTextField()
    context = JSONTextField(null=True)
    # The exact canonical text the hash covers (S-2): what readers and verify trust.
    # NULL on rows written before 0004, which verify from the JSON columns as before.
    sealed = models.TextField(null=True)
    hints = JSONTextField(null=True)
    event_id = NameField(max_length=255, null=True)

    class Meta:
        db_table = "receipt_receipt"
        constraints = [
            models.UniqueConstraint(
                fields=["stream", "stream_seq"], name="receipt_stream_seq_uniq"
            ),
            models.UniqueConstraint(fields=["stream", "receipt_id"], name="receipt_stream_id_uniq"),
            # a constraint, not unique=True: no extra LIKE-pattern index on every append
            models.UniqueConstraint(fields=["hash"], name="receipt_hash_uniq"),
            models.UniqueConstraint(
                fields=["stream", "event_id"],
                name="receipt_stream_event_uniq",
                condition=models.Q(event_id__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.stream}#{self.stream_seq} {self.event_type}"


class Tombstone(models.Model):
    """A stream removed by retention, committed to by the receipt of its batch on a
    `retention/` chain (receipts.core.retention). Written only by `receipts.retention`,
    never updated: verify recomputes each batch's hash from these rows."""

    id = models.BigAutoField(primary_key=True)
    stream = NameField(max_length=255)
    family = models.CharField(max_length=32)  # the retention family whose window applied
    receipt_count = models.BigIntegerField()
    head = NameField(max_length=64)
    final_status = models.CharField(max_length=16)
    settled_at = models.BigIntegerField()  # ms since epoch
    pruned_at = models.BigIntegerField()  # ms since epoch
    organization_id = models.CharField(max_length=128, null=True)
    agent_id = models.CharField(max_length=128, null=True)
    kind = models.CharField(max_length=64, null=True)
    retention_stream = NameField(max_length=255)
    batch = models.BigIntegerField()  # stream_seq of the retention receipt committing to it
    # the stream's leaves in the store-wide log, as ranges ("3-5,9"); None before the log
    leaves = models.TextField(null=True)

    class Meta:
        db_table = "receipt_tombstone"
        indexes = [
            # the 410 of a pruned job and the admin page: the latest tombstone of a stream
            models.Index(fields=["stream", "-id"], name="tombstone_stream"),
            # verify: the rows of one batch
            models.Index(fields=["retention_stream", "batch"], name="tombstone_batch"),
        ]

    def __str__(self) -> str:
        return f"{self.stream} (pruned)"


class LogHead(models.Model):
    """The store-wide log's size and reach (receipts.log). Its one row is the lock an
    extension holds, so extensions from several processes follow one another."""

    id = models.SmallIntegerField(primary_key=True, default=1)
    size = models.BigIntegerField(default=0)  # leaves
    # every receipt with seq <= covered_seq is a leaf (or was rolled back, or pruned)
    covered_seq = models.BigIntegerField(default=0)
    updated_at = models.BigIntegerField(default=0)  # ms since epoch

    class Meta:
        db_table = "receipt_log_head"


class LogTile(models.Model):
    """Up to 32 entries of one level of the log's tree (receipts.core.log_tiles): level
    0 holds the leaves (receipt hashes) and their receipts' seqs, level t the hashes of
    complete 32**t-leaf subtrees. Only the rightmost tile of a level is ever rewritten."""

    pk = models.CompositePrimaryKey("level", "number")
    level = models.SmallIntegerField()
    number = models.BigIntegerField()  # the tile's position within its level
    hashes = models.BinaryField()  # 32 bytes an entry
    seqs = models.BinaryField(null=True)  # level 0: the leaves' seqs, varint deltas
    first_seq = models.BigIntegerField(null=True)  # level 0: its first leaf's seq

    class Meta:
        db_table = "receipt_log_tile"
        indexes = [
            # a receipt's leaf: the level-0 tile with the greatest first_seq <= its seq
            models.Index(
                fields=["first_seq"], name="log_tile_first_seq", condition=models.Q(level=0)
            ),
        ]


class LogCheckpoint(models.Model):
    """Where each checkpoint of the log is on the `checkpoints/log` stream, by tree size
    and by hash. The signed checkpoint itself is that stream's receipt."""

    number = models.BigIntegerField(primary_key=True)  # its stream_seq on checkpoints/log
    tree_size = models.BigIntegerField(unique=True)
    hash = NameField(max_length=64, unique=True)  # receipts.core.checkpoint.checkpoint_hash
    timestamp_ms = models.BigIntegerField()
    key_id = models.CharField(max_length=16, null=True)  # None: unsigned

    class Meta:
        db_table = "receipt_log_checkpoint"
