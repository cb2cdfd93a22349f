"""The inner cross-validation's answer, kept once computed.

:meth:`predictor.model.ThroughputModel._calibrate` (how much of the learned residual to
trust) fits dozens of small forests: most of the CPU a fit takes (about 30 s on the shipped
tables). Its answer is two numbers and depends only on what it is given, so it is kept:
in this process, and on disk under the user's cache directory (``CPN_CACHE_DIR``, else
``$XDG_CACHE_HOME/cpn``, else ``~/.cache/cpn``), keyed by a hash of everything it reads
(the measurements, the table, the family, seed and sizes, the versions of Python, NumPy
and scikit-learn, and the predictor's own source and data files). A directory that
cannot be written (a read-only container) only means it is computed again next time.
Deterministic: the forests are seeded and single-threaded, so a kept answer is the one a
new computation would give.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
import sys
import tempfile
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import sklearn

log = logging.getLogger("predictor")

_memo: dict[str, dict[str, float]] = {}


@cache
def _source_digest() -> str:
    """Hash of the predictor package's source and data files (a code change is a new key)."""
    root = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() and p.suffix != ".pyc"):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def cache_dir() -> Path:
    """Where answers are kept on disk."""
    explicit = os.environ.get("CPN_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "cpn"


def key_of(*parts: Any) -> str | None:
    """The cache key of these inputs, or None when they cannot be hashed (then not kept)."""
    try:
        versions = (sys.version_info[:2], np.__version__, sklearn.__version__)
        blob = pickle.dumps((versions, _source_digest(), parts), protocol=5)
    except (pickle.PicklingError, TypeError, AttributeError):  # not picklable: not kept
        return None
    return hashlib.sha256(blob).hexdigest()


def kept(key: str | None, compute: Callable[[], dict[str, float]]) -> dict[str, float]:
    """``compute()``'s answer for ``key``: from this process, else from disk, else computed
    (and kept). ``key`` None: always computed."""
    if key is None:
        return compute()
    found = _memo.get(key)
    if found is not None:
        return dict(found)
    path = cache_dir() / f"calibration-{key}.json"
    try:
        loaded = json.loads(path.read_text(encoding="utf-8"))
        found = {str(k): float(v) for k, v in loaded.items()}
    except (OSError, ValueError, TypeError, AttributeError):  # missing or not ours: compute
        found = None
    if found is None:
        found = compute()
        _write(path, found)
    _memo[key] = dict(found)
    return dict(found)


def _write(path: Path, value: dict[str, float]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(
            "w", dir=path.parent, prefix=".calibration-", delete=False, encoding="utf-8"
        ) as handle:
            json.dump(value, handle)
        os.replace(handle.name, path)  # atomic: a reader sees the old file or the new one
    except OSError as exc:
        log.debug("calibration not kept at %s: %s", path, exc)
