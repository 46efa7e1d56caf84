"""The lease keeper (D-5, D-11): one thread per `runworker` that keeps the leases of
every attempt its worker processes run, so a worker process needs exactly one database
connection (its handler's) and abort reaches a handler within a second.

Worker processes hand their attempts over through small files in the runworker's
keeper directory (`RECEIPT_KEEPER_DIR`): each worker thread has a slot, `<pid>-<random>.slot`,
that holds the attempt it runs (empty between attempts); the keeper answers with
`<jobId>#<attempt>.stop` when the handler must stop (abort requested, lease lost, job
settled elsewhere). Every pass the keeper:
- releases the lease of an attempt whose worker process died (fenced, at once: no
  waiting for `leaseUntil`);
- heartbeats attempts whose cadence (K-7) is due;
- looks for abort requests on the running jobs (woken by `pg_notify('receipt_abort')`
  on PostgreSQL; every half second anyway, which is the SQLite path);
- beats the worker registry with the attempts it holds;
- runs the runworker's time-critical loops that are due (`jobs.runtime.loops`: delayed
  jobs that came due, lease expiry, gone-holder release, the callbacks pump) on this
  thread's connection: never
  queued behind a retention batch on the maintenance thread, and each pass is short.
A worker process not under a runworker (no keeper directory in its environment) starts
a keeper thread of its own over a private directory.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.db import close_old_connections, connection

from jobs import queue, selectors
from jobs.core.state import Fence
from jobs.runtime import attempt as attempts
from jobs.runtime import loops, recovery
from observability.logs import log_event
from receipts import wire_json
from receipts.clock import now_ms as wall_clock_ms
from receipts.db import notify

logger = logging.getLogger("receipt.keeper")
DIR_ENV = "RECEIPT_KEEPER_DIR"
ABORT_CHANNEL = "receipt_abort"
PASS_S = 0.5
# Every attempt writes and empties its slot here: on a memory file system that is a
# fraction of what a disk-backed /tmp costs.
_MEMORY_FS = "/dev/shm"
SLOT, STOP = ".slot", ".stop"


def new_directory(prefix: str) -> Path:
    """A new keeper directory, in memory where the system offers it."""
    memory = _MEMORY_FS if os.path.isdir(_MEMORY_FS) and os.access(_MEMORY_FS, os.W_OK) else None
    return Path(tempfile.mkdtemp(prefix=prefix, dir=memory))


@dataclass
class Held:
    """An attempt a worker process registered."""

    slot: Path
    job_id: str
    attempt: int
    worker_id: str
    pid: int
    promise_id: str
    cadence_ms: int
    last_beat: float = field(default_factory=time.monotonic)
    stopped: bool = False

    @property
    def fence(self) -> Fence:
        return Fence(self.worker_id, self.attempt)

    @property
    def stop_path(self) -> Path:
        return self.slot.with_name(stop_name(self.job_id, self.attempt))

    def to_wire(self) -> dict[str, Any]:
        return {
            "jobId": self.job_id,
            "attempt": self.attempt,
            "workerId": self.worker_id,
            "pid": self.pid,
        }


# ---- the worker process's side --------------------------------------------------------------

_local: dict[str, Any] = {}
_local_lock = threading.Lock()
_slots: dict[tuple[str, int, int], int] = {}  # (directory, pid, thread) -> its slot's fd


def stop_name(job_id: str, attempt: int) -> str:
    return f"{job_id}#{attempt}{STOP}"


def directory() -> str:
    """This process's keeper directory: the runworker's, or a private one with its own
    keeper thread (a worker outside runworker)."""
    shared = os.environ.get(DIR_ENV)
    if shared:
        return shared
    with _local_lock:
        if _local.get("pid") != os.getpid():
            path = new_directory("receipt-keeper-")
            keeper = Keeper(path)
            thread = threading.Thread(
                target=keeper.run, args=(threading.Event(),), name="lease-keeper", daemon=True
            )
            thread.start()
            _local.update(pid=os.getpid(), path=str(path))
        return _local["path"]


class Lease:
    """A registered attempt, from the worker process's side."""

    def __init__(self, running: attempts.Running, cadence_ms: int) -> None:
        # Runs once per attempt, on the hot path: the thread's slot is opened once, and an
        # attempt empties it and writes its record (no file created or removed: those
        # were about a twentieth of a draining worker's CPU). A reader sees the slot
        # empty, a part of the record (which never parses: the keeper reads it on its next
        # pass) or all of it, never two records mixed.
        folder = directory()
        self._stop_path = f"{folder}/{stop_name(running.job.job_id, running.fence.attempt)}"
        self._slot = _slot(folder)
        record = {
            "jobId": running.job.job_id,
            "attempt": running.fence.attempt,
            "workerId": running.fence.worker_id,
            "pid": os.getpid(),
            "promiseId": running.promise_id,
            "cadenceMs": cadence_ms,
        }
        os.ftruncate(self._slot, 0)
        os.pwrite(self._slot, wire_json.dumps(record).encode(), 0)

    def stop_order(self) -> tuple[str, str] | None:
        """(reason, ended_by) once the keeper told this attempt to stop."""
        try:
            with open(self._stop_path, "rb") as order_file:
                order = json.loads(order_file.read())
        except (FileNotFoundError, ValueError):
            return None
        return str(order["reason"]), str(order["endedBy"])

    def release(self) -> None:
        """The attempt ended: its slot is empty again (a stop order the keeper wrote for it
        is removed by the keeper's next pass)."""
        os.ftruncate(self._slot, 0)


def _slot(folder: str) -> int:
    """The open slot of this thread in `folder` (a forked process opens its own). Its name
    starts with the pid, which the keeper checks, and is new: the keeper may remove the
    slot of a process that died while another process takes over its pid."""
    key = (folder, os.getpid(), threading.get_ident())
    found = _slots.get(key)
    if found is None:
        path = f"{folder}/{key[1]}-{secrets.token_hex(6)}{SLOT}"
        found = _slots[key] = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    return found


def _slot_pid(slot: Path) -> int | None:
    pid = slot.name.partition("-")[0]
    return int(pid) if pid.isdigit() else None


# ---- the keeper ------------------------------------------------------------------------------


def _alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


class Keeper:
    def __init__(
        self,
        path: Path,
        *,
        on_pass: Callable[[list[Held]], None] | None = None,
        schedule: loops.Schedule | None = None,
    ) -> None:
        self.path = path
        self.on_pass = on_pass  # e.g. the registry beat, with the attempts held
        self.schedule = schedule  # loops.Schedule of the time-critical loops, or None
        self.held: dict[tuple[str, str, int], Held] = {}  # by (slot, jobId, attempt)
        self._listening: Any = None

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.one_pass()
            except Exception as error:  # never die: a missed pass is a late beat
                log_event(
                    logger,
                    "keeper.pass_failed",
                    f"lease keeper pass failed: {error}",
                    level=logging.WARNING,
                    exc_info=True,
                )
                close_old_connections()
            self._wait(stop)

    def one_pass(self) -> None:
        self._scan()
        now = time.monotonic()
        for held in list(self.held.values()):
            if held.stopped:
                continue
            if not _alive(held.pid):
                self._release_dead(held)
            elif (now - held.last_beat) * 1000 >= held.cadence_ms:
                self._beat(held)
        self._check_aborts()
        if self.on_pass is not None:
            self.on_pass(list(self.held.values()))
        if self.schedule is not None:
            self.schedule.run_due()  # each loop records and survives its own errors

    def _scan(self) -> None:
        seen = set()
        for slot in self.path.glob(f"*{SLOT}"):
            try:
                text = slot.read_bytes()
            except FileNotFoundError:
                continue
            if not text:  # between attempts; gone with its process
                pid = _slot_pid(slot)
                if pid is not None and not _alive(pid):
                    slot.unlink(missing_ok=True)
                continue
            try:
                record = json.loads(text)
            except ValueError:  # being written: read on the next pass
                continue
            key = (slot.name, record["jobId"], int(record["attempt"]))
            seen.add(key)
            if key not in self.held:
                self.held[key] = Held(
                    slot,
                    record["jobId"],
                    int(record["attempt"]),
                    record["workerId"],
                    int(record["pid"]),
                    record["promiseId"],
                    int(record["cadenceMs"]),
                )
        for key in set(self.held) - seen:  # the worker finished and released it
            del self.held[key]
        ordered = {held.stop_path.name for held in self.held.values()}
        for stop in self.path.glob(f"*{STOP}"):  # its attempt ended
            if stop.name not in ordered:
                stop.unlink(missing_ok=True)

    def _order_stop(self, held: Held, reason: str, ended_by: str) -> None:
        held.stopped = True
        tmp = held.stop_path.with_suffix(".stoptmp")
        tmp.write_text(json.dumps({"reason": reason, "endedBy": ended_by}))
        tmp.replace(held.stop_path)
        log_event(
            logger,
            "keeper.stop",
            f"{held.job_id} attempt {held.attempt}: {reason}",
            jobId=held.job_id,
            endedBy=ended_by,
        )

    def _beat(self, held: Held) -> None:
        result = attempts.beat(held.job_id, held.fence, now_ms=wall_clock_ms())
        held.last_beat = time.monotonic()
        if result.stop is not None and result.ended_by is not None:
            self._order_stop(held, result.stop, result.ended_by)

    def _check_aborts(self) -> None:
        live = {h.job_id: h for h in self.held.values() if not h.stopped}
        if not live:
            return
        for job in selectors.states(live):
            held = live[job.job_id]
            if job.is_terminal or held.fence.check(job).value != "ok":
                self._order_stop(
                    held, "lease lost", "terminal_state" if job.is_terminal else "lease_lost"
                )
            elif job.abort_requested:
                self._order_stop(held, job.abort_reason or queue.ABORT_REQUESTED_REASON, "canceled")

    def _release_dead(self, held: Held) -> None:
        """The worker process died mid-attempt: give the job back now (fenced)."""
        released = recovery.release_holder(
            held.job_id,
            held.fence,
            now_ms=wall_clock_ms(),
            reason=f"worker process {held.pid} died",
        )
        log_event(
            logger,
            "keeper.released",
            f"{held.job_id} attempt {held.attempt}: worker process {held.pid} died",
            level=logging.WARNING,
            jobId=held.job_id,
            outcome=released.outcome.value,
        )
        held.slot.unlink(missing_ok=True)
        held.stop_path.unlink(missing_ok=True)
        self.held = {key: other for key, other in self.held.items() if other is not held}

    def _wait(self, stop: threading.Event) -> None:
        """Until the next pass, or an abort notification (PostgreSQL)."""
        if connection.vendor != "postgresql" or not self.held:
            stop.wait(PASS_S)
            return
        try:
            notify.wait(self._listen(), PASS_S)
        except Exception:
            self._listening = None
            stop.wait(PASS_S)

    def _listen(self) -> Any:
        connection.ensure_connection()
        raw = connection.connection
        if self._listening is not raw:  # a new connection: listen again
            # the wake-up is the point, not the payload
            notify.listen(raw, [ABORT_CHANNEL], _ignore)
            self._listening = raw
        return raw


def _ignore(notify: Any) -> None:
    pass
