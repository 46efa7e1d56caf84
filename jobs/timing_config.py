"""The timing settings of the running configuration (`settings.RECEIPT`), made once per
configuration object rather than on every write that needs a lease length."""

from __future__ import annotations

from django.conf import settings

from jobs.core.timing import TimingSettings

_made_for: tuple[object, TimingSettings] | None = None


def current_timing() -> TimingSettings:
    """A frozen object; a test that swaps `settings.RECEIPT` gets the new one's."""
    global _made_for
    config = settings.RECEIPT
    if _made_for is None or _made_for[0] is not config:
        _made_for = (config, TimingSettings.from_config(config))
    return _made_for[1]
