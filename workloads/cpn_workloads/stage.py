"""Copy one input of an AIJob onto the node: the program a cpn staging Job runs.

``python -m cpn_workloads.stage --tool T --uri U --dest D [--bytes N]``

``copy`` (the default) reads ``file://`` paths, plain paths and ``http(s)://`` URLs with
the standard library; ``rsync`` and ``rclone`` run those tools (which the image must hold).
The copy lands in ``D.partial`` and is renamed to ``D`` only once complete, so a failed or
interrupted staging never leaves a half copy under the final name. When ``--bytes`` is
given the copy must be that long. It prints one JSON line (dest, bytes, seconds), writes the
same line to ``--report`` (default ``/dev/termination-log``, the container's termination
message, where cpn reads the size of an input declared without one) when that file exists
(the kubelet creates it in every container), and exits 0; or names what failed and exits
1. Standard library only: no torch is imported.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

TOOLS = ("copy", "rsync", "rclone")


def _size(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size


def _copy(uri: str, partial: Path) -> None:
    if uri.startswith(("http://", "https://")):
        with urllib.request.urlopen(uri, timeout=60) as answer, partial.open("wb") as out:
            shutil.copyfileobj(answer, out, 1 << 20)
        return
    source = Path(uri.removeprefix("file://"))
    if source.is_dir():
        shutil.copytree(source, partial)
    else:
        shutil.copyfile(source, partial)


def stage(tool: str, uri: str, dest: Path, size: int | None) -> int:
    """Copy ``uri`` to ``dest`` with ``tool``; the bytes copied."""
    partial = dest.with_name(dest.name + ".partial")
    if partial.is_dir():
        shutil.rmtree(partial)
    elif partial.exists():
        partial.unlink()
    dest.parent.mkdir(parents=True, exist_ok=True)
    if tool == "copy":
        _copy(uri, partial)
    else:
        command = (
            ["rsync", "-a", uri, str(partial)]
            if tool == "rsync"
            else ["rclone", "copyto", uri, str(partial)]
        )
        subprocess.run(command, check=True)
    copied = _size(partial)
    if size and copied != size:
        raise RuntimeError(f"copied {copied} bytes, expected {size}")
    if dest.is_dir():
        shutil.rmtree(dest)
    os.replace(partial, dest)
    return copied


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cpn_workloads.stage", description=__doc__.split("\n")[0])
    parser.add_argument("--tool", choices=TOOLS, default="copy")
    parser.add_argument("--uri", required=True)
    parser.add_argument("--dest", required=True, type=Path)
    parser.add_argument("--bytes", type=int, default=0, help="expected size (0: unknown)")
    parser.add_argument("--report", type=Path, default=Path("/dev/termination-log"))
    args = parser.parse_args(argv)
    began = time.monotonic()
    try:
        copied = stage(args.tool, args.uri, args.dest, args.bytes or None)
    except (OSError, RuntimeError, subprocess.CalledProcessError) as err:
        print(f"staging {args.uri} to {args.dest} failed: {err}", file=sys.stderr)
        return 1
    took = time.monotonic() - began
    line = json.dumps({"dest": str(args.dest), "bytes": copied, "seconds": round(took, 3)})
    print(line)
    if args.report.exists():
        try:
            args.report.write_text(line + "\n")
        except OSError as err:  # the copy is done: a report not written is only told
            print(f"report not written to {args.report}: {err}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
