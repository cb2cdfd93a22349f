"""Which layout a Testbed object takes from a state folder: a running bed keeps the nodes
file it was started with; a stopped one (an older checkout's CI, say) does not impose it."""

from __future__ import annotations

import json
import os
from pathlib import Path

from testbed import procs
from testbed.bed import Testbed
from testbed.fixtures import same_layout
from testbed.spec import default_nodes_file, load_spec

OLD_LAYOUT = """
gpu_models:
  V100-32GB:
    product: Tesla V100-SXM2-32GB
    family: volta
    memory_mib: 32768
    power_limit_w: 300
    idle_power_w: 40
members:
  old-member:
    - {prefix: v100-node, count: 1, gpu_model: V100-32GB, gpus: 4, cpu: 48, memory_gib: 384}
"""


def state_of(tmp_path: Path, nodes: Path, recorded: dict[str, procs.Proc]) -> Path:
    state = tmp_path / "state"
    state.mkdir()
    doc = {
        "nodes_file": str(nodes),
        "port_base": 23000,
        "procs": {k: p.to_json() for k, p in recorded.items()},
    }
    (state / "state.json").write_text(json.dumps(doc))
    return state


def old_nodes(tmp_path: Path) -> Path:
    path = tmp_path / "old-nodes.yaml"
    path.write_text(OLD_LAYOUT)
    return path


def test_a_stopped_bed_does_not_impose_the_layout_it_was_started_with(tmp_path: Path) -> None:
    state = state_of(tmp_path, old_nodes(tmp_path), {})
    tb = Testbed(state_dir=state)
    assert tb.nodes_file == default_nodes_file()
    assert "old-member" not in tb.members
    assert tb.spec.port_base == load_spec().port_base


def test_a_running_bed_keeps_its_layout_and_ports(tmp_path: Path) -> None:
    me = procs.Proc(pid=os.getpid(), start_ticks=_ticks(os.getpid()), argv=("pytest",))
    assert procs.alive(me)
    state = state_of(tmp_path, old_nodes(tmp_path), {"old-member/etcd": me})
    tb = Testbed(state_dir=state)
    assert tb.members == ("old-member",)
    assert tb.spec.port_base == 23000
    assert not same_layout(tb.nodes_file, default_nodes_file())


def _ticks(pid: int) -> int:
    raw = Path(f"/proc/{pid}/stat").read_text()
    return int(raw[raw.rindex(")") + 2 :].split()[19])


def test_stray_processes_are_found_but_not_the_shell_that_started_us(tmp_path: Path) -> None:
    """A process naming the state dir is a stray; the shell that started this process (an
    ancestor naming the dir in its own command line, as a CI launcher may) is not."""
    import subprocess
    import sys

    state = tmp_path / "state"
    state.mkdir()
    stray = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", str(state)])
    probe = (
        "import sys; from testbed.bed import Testbed; "
        f"print(sorted(Testbed(state_dir=__import__('pathlib').Path({str(state)!r}))"
        ".stray_processes()))"
    )
    try:
        # bash -c 'python ...; true # <dir>': the bash names the dir and is the probe's parent
        shell = subprocess.run(
            ["bash", "-c", f'"{sys.executable}" -c "{probe}"; true # {state}'],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).resolve().parents[1],
        )
    finally:
        stray.kill()
        stray.wait()
    assert json.loads(shell.stdout) == [stray.pid]
