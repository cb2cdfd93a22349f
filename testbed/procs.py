"""Start, identify and stop the bed's processes.

Every component is started detached (its own session, parent = init), so it
outlives the ``cpn testbed up`` that started it and never lingers as a zombie
of a long-lived Python process such as pytest. A process is identified by its
pid *and* its start time (``/proc/<pid>/stat`` field 22), so a recycled pid is
never mistaken for a component and never killed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True, kw_only=True)
class Proc:
    """A started process: pid, its kernel start time and its command."""

    pid: int
    start_ticks: int
    argv: tuple[str, ...]

    def to_json(self) -> dict[str, object]:
        """Serialisable form for the state file."""
        return {"pid": self.pid, "start_ticks": self.start_ticks, "argv": list(self.argv)}

    @classmethod
    def from_json(cls, raw: dict[str, object]) -> Proc:
        """Inverse of :meth:`to_json`."""
        pid, ticks, argv = raw["pid"], raw["start_ticks"], raw["argv"]
        if not isinstance(pid, int) or not isinstance(ticks, int) or not isinstance(argv, list):
            raise ValueError(f"bad process record {raw!r}")
        return cls(pid=pid, start_ticks=ticks, argv=tuple(str(a) for a in argv))


def _stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks) of ``pid``, or None if it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # the command name (field 2) may hold spaces; everything after the last ')' is fixed
    fields = raw[raw.rindex(")") + 2 :].split()
    return fields[0], int(fields[19])


def alive(proc: Proc) -> bool:
    """True while the very process we started runs (not a zombie, pid not recycled)."""
    st = _stat(proc.pid)
    return st is not None and st[0] not in {"Z", "X"} and st[1] == proc.start_ticks


def rss_bytes(proc: Proc) -> int:
    """Resident memory of the process (0 if it is gone)."""
    if not alive(proc):
        return 0
    try:
        for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except FileNotFoundError:
        return 0
    return 0


def spawn(
    argv: list[str], log: Path, *, env: dict[str, str] | None = None, cwd: Path | None = None
) -> Proc:
    """Start ``argv`` detached in ``cwd``, stdout+stderr appended to ``log``; return its record."""
    log.parent.mkdir(parents=True, exist_ok=True)
    if cwd is not None:
        cwd.mkdir(parents=True, exist_ok=True)
    # sh starts the command in the background, writes its pid to a pipe and exits
    # at once, so the command is re-parented to init and reaped there when it ends.
    out = subprocess.run(
        ["/bin/sh", "-c", '"$@" </dev/null >>"$0" 2>&1 & echo $!', str(log), *argv],
        env=env,
        cwd=cwd,
        start_new_session=True,
        capture_output=True,
        text=True,
        check=True,
    )
    pid = int(out.stdout.strip())
    st = _stat(pid)
    if st is None:
        raise RuntimeError(f"{argv[0]} exited at once; see {log}")
    return Proc(pid=pid, start_ticks=st[1], argv=tuple(argv))


def stop(procs: list[Proc], *, grace_s: float = 10.0) -> list[Proc]:
    """SIGTERM each live process, SIGKILL what is left after ``grace_s``; return survivors."""
    live = [p for p in procs if alive(p)]
    for p in live:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(alive(p) for p in live):
        time.sleep(0.05)
    for p in live:
        if alive(p):
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and any(alive(p) for p in live):
        time.sleep(0.05)
    return [p for p in live if alive(p)]
