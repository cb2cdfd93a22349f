"""The staging copy program (workloads/cpn_workloads/stage.py) copies for real: standard
library only, so it runs on the operator's python."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _stage(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cpn_workloads.stage", *args],
        cwd=ROOT / "workloads",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_copies_a_file_whole_and_says_how_much(tmp_path: Path) -> None:
    source = tmp_path / "src.bin"
    source.write_bytes(b"x" * 4096)
    dest = tmp_path / "cache" / "imagenet@v1"
    done = _stage("--uri", f"file://{source}", "--dest", str(dest), "--bytes", "4096")
    assert done.returncode == 0, done.stderr
    assert dest.read_bytes() == b"x" * 4096
    assert not dest.with_name("imagenet@v1.partial").exists()
    assert json.loads(done.stdout)["bytes"] == 4096


def test_copies_a_directory(tmp_path: Path) -> None:
    source = tmp_path / "shards"
    source.mkdir()
    for i in range(3):
        (source / f"{i}.bin").write_bytes(b"y" * 100)
    dest = tmp_path / "cache" / "shards"
    done = _stage("--uri", str(source), "--dest", str(dest), "--bytes", "300")
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in dest.iterdir()) == ["0.bin", "1.bin", "2.bin"]


def test_a_short_copy_fails_and_leaves_nothing_under_the_final_name(tmp_path: Path) -> None:
    source = tmp_path / "src.bin"
    source.write_bytes(b"z" * 10)
    dest = tmp_path / "cache" / "d"
    done = _stage("--uri", str(source), "--dest", str(dest), "--bytes", "11")
    assert done.returncode == 1
    assert "expected 11" in done.stderr
    assert not dest.exists()


def test_a_missing_source_fails_with_its_name(tmp_path: Path) -> None:
    done = _stage("--uri", str(tmp_path / "nope"), "--dest", str(tmp_path / "d"))
    assert done.returncode == 1
    assert "nope" in done.stderr


def test_reports_the_bytes_copied_in_its_termination_message(tmp_path: Path) -> None:
    source = tmp_path / "src.bin"
    source.write_bytes(b"z" * 777)
    report = tmp_path / "termination-log"
    report.write_text("")  # the kubelet creates it
    dest = tmp_path / "cache" / "weights"
    done = _stage("--uri", str(source), "--dest", str(dest), "--report", str(report))
    assert done.returncode == 0, done.stderr
    assert json.loads(report.read_text())["bytes"] == 777


def test_writes_no_report_where_there_is_no_termination_log(tmp_path: Path) -> None:
    source = tmp_path / "src.bin"
    source.write_bytes(b"z" * 10)
    report = tmp_path / "absent" / "termination-log"
    done = _stage("--uri", str(source), "--dest", str(tmp_path / "d"), "--report", str(report))
    assert done.returncode == 0, done.stderr
    assert not report.exists()
