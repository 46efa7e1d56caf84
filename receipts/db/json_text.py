"""psycopg's side of `receipts.json_text`: `json` columns read as text (Django parses
it, as it does `jsonb`'s), and a value sent as `json`, never parsed into `jsonb` on the
way in. The loader is registered on psycopg's global adapters on import, while Django
sets up its apps, before any connection copies them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from psycopg import adapters
from psycopg.types.json import Json
from psycopg.types.string import TextLoader

adapters.register_loader("json", TextLoader)


def json_param(value: Any, dumps: Callable[[Any], str]) -> Any:
    """`value` as a `json` parameter, its text made by `dumps`."""
    return Json(value, dumps=dumps)
