"""A component whose Go runtime crashes during start-up is started again; one that exits
for another reason is not. Real processes (a shell script standing in for the binary),
real logs; the health check is the process alive and having said "ready"."""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

import pytest

from testbed import procs
from testbed.bed import CRASH_RESTARTS, Testbed, TestbedError, go_runtime_crash

KWOK_CRASH = """{"level":"INFO","msg":"Watch nodes"}
fatal error: concurrent map writes

goroutine 37 [running]:
internal/runtime/maps.fatal({0x26bd597?, 0x31dc02ab3350?})
"""


def test_the_go_runtime_fatal_error_is_read_from_the_log() -> None:
    assert go_runtime_crash(KWOK_CRASH) == "concurrent map writes"
    assert go_runtime_crash("Error: unknown flag: --bogus\n") is None
    assert go_runtime_crash("") is None


def bed_with_script(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str
) -> tuple[Testbed, Any, Path]:
    """A bed whose member kwok is ``body`` (a shell script run with a counter file as $1)."""
    tb = Testbed(state_dir=tmp_path / "state", port_base=26900)
    cluster = tb.spec.clusters[-1]
    script = tmp_path / "component.sh"
    script.write_text(body)
    counter = tmp_path / "starts"
    monkeypatch.setattr(tb, "_argv", lambda *_: ["/bin/sh", str(script), str(counter)])
    monkeypatch.setattr(tb, "_env", lambda *_: None)

    def ready(name: str, component: str) -> tuple[bool, str]:
        proc = tb._procs.get(f"{name}/{component}")
        said = tb.log(name, component).read_text().endswith("ready\n")
        return (proc is not None and procs.alive(proc) and said, "")

    monkeypatch.setattr(tb, "_check", ready)
    return tb, cluster, counter


# the first start crashes as KWOK did; the next ones say ready and run until killed
CRASH_ONCE = """echo x >> "$1"
if [ "$(wc -l < "$1")" -eq 1 ]; then
  echo "fatal error: concurrent map writes"; echo "goroutine 37 [running]:"; exit 2
fi
echo ready
exec sleep 60
"""


def test_a_component_that_crashes_at_start_up_is_started_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tb, cluster, counter = bed_with_script(tmp_path, monkeypatch, CRASH_ONCE)
    try:
        assert tb._start(cluster, "kwok", None, time.monotonic() + 30)  # type: ignore[arg-type]
        assert counter.read_text().count("x") == 2
        assert "fatal error: concurrent map writes" in tb.log(cluster.name, "kwok").read_text()
    finally:
        tb.down()


@pytest.mark.parametrize(
    ("body", "starts"),
    [
        pytest.param('echo x >> "$1"; echo "Error: unknown flag"; exit 2\n', 1, id="bad flag"),
        pytest.param(
            'echo x >> "$1"; echo "fatal error: concurrent map writes"; exit 2\n',
            CRASH_RESTARTS + 1,
            id="crashes every time",
        ),
    ],
)
def test_other_exits_and_repeated_crashes_fail_with_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str, starts: int
) -> None:
    tb, cluster, counter = bed_with_script(tmp_path, monkeypatch, body)
    try:
        with pytest.raises(
            RuntimeError, match=r"exited (during start-up|at once); see .*kwok\.log"
        ):
            tb._start(cluster, "kwok", None, time.monotonic() + 30)  # type: ignore[arg-type]
        assert counter.read_text().count("x") == starts
    finally:
        tb.down()


def test_a_taken_port_fails_with_its_own_error_before_any_log_exists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing was started, so there is no log to read: the port error is what is raised."""
    tb, cluster, counter = bed_with_script(tmp_path, monkeypatch, CRASH_ONCE)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", cluster.port(tb.spec.port_base, "kwok")))
        taken.listen()
        with pytest.raises(TestbedError, match="is taken by another process"):
            tb._start(cluster, "kwok", None, time.monotonic() + 30)  # type: ignore[arg-type]
    assert not counter.exists() and not tb.log(cluster.name, "kwok").exists()
