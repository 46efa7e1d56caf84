"""API tokens (A-10, Q-1): created once, shown once, stored as a sha256 digest.

Tokens carry 256 bits of randomness, so a plain sha256 digest is enough (no slow KDF
needed) and lets a request find its token with one indexed lookup.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

# factory:commands: payloads that carry shell commands (tasks, checks, publication); see
# jobs.core.shell_commands, which names the same scope without importing this module.
SCOPES = ("jobs:write", "jobs:read", "jobs:control", "objectives:read", "factory:commands")
TOKEN_PREFIX = "rcpt_"
PUBLIC_PREFIX = 12  # leading characters kept as ApiToken.prefix: shown in the admin and logs


def new_secret() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def matches(secret: str, stored_digest: str) -> bool:
    return hmac.compare_digest(digest(secret), stored_digest)


def parse_scopes(values: list[str] | None) -> list[str]:
    """Normalise scopes; None or empty means every scope (A-10)."""
    if not values:
        return list(SCOPES)
    flat = [s.strip() for v in values for s in v.split(",") if s.strip()]
    unknown = sorted(set(flat) - set(SCOPES))
    if unknown:
        raise ValueError(f"unknown scope(s) {', '.join(unknown)}; known: {', '.join(SCOPES)}")
    return [s for s in SCOPES if s in flat]
