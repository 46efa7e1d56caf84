"""What other apps add to the admin job page (U-2): links and sections.

`jobs` must not import the apps built on it (Factory registers its handlers into jobs),
so an app registers a provider here in its `AppConfig.ready`, and the job page asks
every provider about the job it shows. A provider that raises costs its own part of the
page only: the page shows the error in its place, never a 500.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from jobs.core.state import JobState


@dataclass(frozen=True)
class Link:
    label: str  # what the target is to this job: "objective", "created objective"
    text: str
    url: str


@dataclass(frozen=True)
class Section:
    id: str  # the HTML id; a section is refreshed live with the page
    title: str
    template: str
    context: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Contribution:
    links: tuple[Link, ...] = ()
    sections: tuple[Section, ...] = ()


Provider = Callable[[JobState], Contribution | None]
_providers: list[Provider] = []


def register(provider: Provider) -> None:
    if provider not in _providers:
        _providers.append(provider)


def unregister(provider: Provider) -> None:
    if provider in _providers:
        _providers.remove(provider)


def collect(job: JobState) -> tuple[list[Link], list[Section], list[str]]:
    """(links, sections, errors) from every provider, in registration order."""
    links: list[Link] = []
    sections: list[Section] = []
    errors: list[str] = []
    for provider in _providers:
        try:
            part = provider(job)
        except Exception as error:  # one broken provider must not take the page down
            errors.append(
                f"{getattr(provider, '__qualname__', provider)}: {type(error).__name__}: {error}"
            )
            continue
        if part is not None:
            links += part.links
            sections += part.sections
    return links, sections, errors
