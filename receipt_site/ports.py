"""Is the API's port free? Asked before serving, so a taken port is a clear refusal instead
of a server that restarts forever while another program answers at the printed URL.

Standard library only: `scripts/run` runs it with the system Python before anything is
installed (`python3 -m receipt_site.ports HOST PORT HINT`); `runstack` imports it.
"""

from __future__ import annotations

import socket
import sys


def why_taken(host: str, port: int) -> str | None:
    """None when a server could bind host:port now, else the operating system's reason.

    The probe binds as uvicorn does (SO_REUSEADDR), so a port merely in TIME_WAIT counts
    as free; a listening socket on it, on this address or on every address, does not."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            return error.strerror or str(error)
    return None


def refusal(host: str, port: int, reason: str, *, hint: str) -> str:
    """What to tell the person starting Receipt; `hint` shows how to choose a port, with
    {port} standing for a suggestion."""
    if "in use" in reason.lower():
        what = "is already in use: another program is listening there"
    else:
        what = f"cannot be used ({reason})"
    suggestion = hint.format(port=port + 1 if port < 65535 else 8001)
    return (
        f"port {port} on {host} {what}, so Receipt would not be reachable at "
        f"http://{host}:{port}/. Stop that program, or choose another port: {suggestion}"
    )


def main(argv: list[str]) -> int:
    host, raw_port, hint = argv
    if not raw_port.isdigit() or not 0 < int(raw_port) < 65536:
        print(f"PORT must be a number from 1 to 65535, not {raw_port!r}", file=sys.stderr)
        return 2
    reason = why_taken(host, int(raw_port))
    if reason is None:
        return 0
    print(refusal(host, int(raw_port), reason, hint=hint), file=sys.stderr)
    return 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
