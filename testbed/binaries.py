"""Where the test bed's binaries are: the Go build cache and the system packages."""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

GO_DIR = Path(__file__).with_name("go")
#: built by testbed/go/build.sh
GO_BINARIES = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
    "kwok",
)


class MissingBinaryError(RuntimeError):
    """A binary the bed needs is not installed; the message says how to get it."""


def cache_key(go_dir: Path = GO_DIR, files: tuple[str, ...] = ("go.sum", "build.sh")) -> str:
    """First 12 hex digits of sha256 of ``files`` in ``go_dir``, as its build.sh computes it."""
    digest = hashlib.sha256()
    for name in files:
        digest.update((go_dir / name).read_bytes())
    return digest.hexdigest()[:12]


def cache_dir() -> Path:
    """``$CPN_TESTBED_CACHE``, else ``~/.cache/cpn-testbed``: where the Go builds are kept."""
    return Path(os.environ.get("CPN_TESTBED_CACHE") or Path.home() / ".cache" / "cpn-testbed")


def default_bin_dir() -> Path:
    """``$CPN_TESTBED_BIN``, else ``${CPN_TESTBED_CACHE:-~/.cache/cpn-testbed}/<key>/bin``."""
    explicit = os.environ.get("CPN_TESTBED_BIN")
    if explicit:
        return Path(explicit)
    return cache_dir() / cache_key() / "bin"


@dataclass(frozen=True, slots=True, kw_only=True)
class Binaries:
    """Absolute paths of every executable the bed runs."""

    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kubectl: Path
    kwok: Path
    prometheus: Path

    @classmethod
    def locate(cls, bin_dir: Path | None = None) -> Binaries:
        """Find every binary or raise MissingBinaryError naming what is missing."""
        bin_dir = bin_dir or default_bin_dir()
        missing = [n for n in GO_BINARIES if not os.access(bin_dir / n, os.X_OK)]
        prometheus = shutil.which("prometheus")
        if missing:
            raise MissingBinaryError(
                f"missing {', '.join(missing)} in {bin_dir}: run `bash testbed/setup.sh`"
            )
        if prometheus is None:
            raise MissingBinaryError("prometheus is not installed: run `bash testbed/setup.sh`")
        return cls(
            etcd=bin_dir / "etcd",
            kube_apiserver=bin_dir / "kube-apiserver",
            kube_controller_manager=bin_dir / "kube-controller-manager",
            kube_scheduler=bin_dir / "kube-scheduler",
            kubectl=bin_dir / "kubectl",
            kwok=bin_dir / "kwok",
            prometheus=Path(prometheus),
        )
