"""Structured logs, below every app: each app logs through `observability.logs`."""
