"""A blocking SSE reader for tests: frames one by one, every read bounded by a deadline."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass

import httpx


@dataclass(frozen=True)
class Frame:
    event: str
    data: str
    id: int | None


def parse(lines: Iterator[str]) -> Iterator[Frame]:
    event, ident, data = "message", None, list[str]()
    for line in lines:
        if line == "":
            if data:
                yield Frame(event, "\n".join(data), ident)
            event, data, ident = "message", [], None
            continue
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "event":
            event = value
        elif field == "data":
            data.append(value)
        elif field == "id":
            ident = int(value)


class Stream:
    """An open text/event-stream response. The server pings every few hundred ms (the
    test server's keepalive), so the overall deadline is checked at least that often."""

    def __init__(self, client: httpx.Client, url: str, headers: dict[str, str]) -> None:
        self._context = client.stream("GET", url, headers=headers)
        self.response = self._context.__enter__()
        self._frames = (
            parse(self.response.iter_lines()) if self.response.status_code == 200 else iter(())
        )
        self.closed_by_server = False

    def next(self) -> Frame | None:
        """The next frame (each read is bounded by the client's read timeout); None once
        the server has ended the stream."""
        frame = next(self._frames, None)
        if frame is None:
            self.closed_by_server = True
        return frame

    def until(
        self, predicate: Callable[[Frame], bool], *, timeout: float = 10.0, message: str = "frame"
    ) -> list[Frame]:
        """Frames up to and including the first matching one."""
        deadline = time.monotonic() + timeout
        seen: list[Frame] = []
        while True:
            frame = self.next()
            if frame is None:
                raise AssertionError(f"stream ended before {message}; got {seen[-10:]}")
            seen.append(frame)
            if predicate(frame):
                return seen
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"timed out after {timeout}s waiting for {message}; last frames {seen[-5:]}"
                )

    def rest(self, *, timeout: float = 10.0) -> list[Frame]:
        """Every frame until the server ends the stream."""
        deadline = time.monotonic() + timeout
        seen: list[Frame] = []
        while (frame := self.next()) is not None:
            seen.append(frame)
            if time.monotonic() > deadline:
                raise AssertionError(f"stream still open after {timeout}s")
        return seen

    def close(self) -> None:
        self._context.__exit__(None, None, None)

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def aparse(lines: AsyncIterator[str]) -> AsyncIterator[Frame]:
    """`parse` for httpx's async line iterator."""
    event, ident, data = "message", None, list[str]()
    async for line in lines:
        if line == "":
            if data:
                yield Frame(event, "\n".join(data), ident)
            event, data, ident = "message", [], None
            continue
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "event":
            event = value
        elif field == "data":
            data.append(value)
        elif field == "id":
            ident = int(value)
