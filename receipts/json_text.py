"""A JSON column kept as its text: PostgreSQL's `json` type instead of `jsonb`.

`jsonb` parses every value written into a binary tree (de-escaping each string, sorting
each object's keys) and prints it again on every read. A read model rewritten on each of
its job's receipts and read whole, never searched inside, pays that on both ways for
nothing: `json` only checks the text and hands it back as written. `->`, `->>` and `#>>`
work the same on both; what `json` lacks is equality, containment (`@>`, `?`) and
indexes, so its columns are compared through `->>` texts. On SQLite nothing changes.

Django reads `jsonb` as text and parses it itself; receipts.db.json_text has psycopg read
`json` as text too, so raw statements and the ORM get text from both."""

from __future__ import annotations

import json
from functools import partial
from typing import Any

from django.db import models

from receipts.db.json_text import json_param


class JSONTextField(models.JSONField):
    """A `JSONField` stored as `json` on PostgreSQL (see the module's note)."""

    def db_type(self, connection: Any) -> str | None:
        if connection.vendor == "postgresql":
            return "json"
        return super().db_type(connection)

    def get_db_prep_value(self, value: Any, connection: Any, prepared: bool = False) -> Any:
        if connection.vendor != "postgresql":
            return super().get_db_prep_value(value, connection, prepared)
        if not prepared:
            value = self.get_prep_value(value)
        dumps = json.dumps if self.encoder is None else partial(json.dumps, cls=self.encoder)
        return json_param(value, dumps)  # sent as json: no jsonb parse on the way in
