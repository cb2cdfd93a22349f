"""The layering contracts in pyproject.toml hold on the code, and each of them bites.

``make lint`` runs ``lint-imports`` the way :func:`_lint` does. The biting tests copy
the contracts (without their known exceptions) onto a tiny package tree with one bad
import and check that exactly the contracts meant to catch it break.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONFIG: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"][
    "importlinter"
]
CONTRACTS: dict[str, dict[str, Any]] = {c["id"]: c for c in CONFIG["contracts"]}


#: The known violations the redesign removes (#18). A contract may lose entries, never gain
#: one: a new exception means changing this list in review, not only the config.
def _run(
    args: list[str], cwd: Path, *, env: dict[str, str] | None = None, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args,
        cwd=cwd,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _lint(cwd: Path, pythonpath: str) -> tuple[int, dict[str, str]]:
    """Run lint-imports in ``cwd``: its exit code and each contract's KEPT/BROKEN by id."""
    env = {**os.environ, "PYTHONPATH": pythonpath, "COLUMNS": "400"}
    exe = Path(sys.executable).parent / "lint-imports"
    done = _run([str(exe), "--no-cache", "--no-logo"], cwd, env=env)
    verdicts: dict[str, str] = {}
    for contract_id, contract in CONTRACTS.items():
        found = re.search(rf"^{re.escape(contract['name'])} (KEPT|BROKEN)", done.stdout, re.M)
        assert found, f"no verdict for {contract_id}:\n{done.stdout}\n{done.stderr}"
        verdicts[contract_id] = found.group(1)
    return done.returncode, verdicts


def test_the_code_keeps_every_contract():
    """lint-imports, as make lint runs it, passes on the repository."""
    code, verdicts = _lint(ROOT, "operator:.")
    assert verdicts == dict.fromkeys(CONTRACTS, "KEPT")
    assert code == 0


def test_the_contracts_say_what_the_layering_promises():
    """The forbidden lists name every library each layer must not reach."""
    clients = {"kubernetes", "kopf", "requests", "prometheus_api_client"}
    assert CONTRACTS["pure-core"]["source_modules"] == ["cpn.core"]
    assert set(CONTRACTS["pure-core"]["forbidden_modules"]) >= clients | {
        "kubernetes_asyncio",
        "structlog",
        "predictor",
        "testbed",
    }
    assert set(CONTRACTS["clients-in-adapters"]["source_modules"]) >= {
        "cpn.core",
        "cpn.api",
        "cpn.runtime",
        "cpn.sim",
    }
    assert set(CONTRACTS["clients-in-adapters"]["forbidden_modules"]) >= clients
    assert CONTRACTS["predictor-alone"]["forbidden_modules"] == ["cpn"]
    assert set(CONTRACTS["cli-through-adapters"]["source_modules"]) >= {"cpn.cli", "cpn.__main__"}
    assert set(CONTRACTS["cli-through-adapters"]["forbidden_modules"]) >= clients
    assert "cpn.cli" in CONTRACTS["kopf-in-handlers"]["source_modules"]
    layers = [re.split(r"\s*[|:]\s*", layer) for layer in CONTRACTS["layers"]["layers"]]
    order = [layer[0] for layer in layers]
    assert order == ["cli", "handlers", "adapters", "runtime", "api", "core"]
    assert "sim" in layers[order.index("runtime")]


def test_no_contract_has_exceptions():
    """No contract ignores an import: every layer rule holds as written."""
    for contract_id, contract in CONTRACTS.items():
        assert not contract.get("ignore_imports"), contract_id


def _toml(value: Any) -> str:
    return json.dumps(value)  # strings, lists of strings and booleans read the same in TOML


def _tree(tmp_path: Path, bad_module: str, bad_import: str) -> Path:
    """A package tree with every module the contracts name, one of them importing badly."""
    modules = {"cpn", "predictor"}
    for contract in CONTRACTS.values():
        for layer in contract.get("layers", []):
            modules |= {f"cpn.{tail}" for tail in re.split(r"\s*[|:]\s*", layer)}
        modules |= set(contract.get("source_modules", []))
    for module in modules:
        path = tmp_path.joinpath(*module.split("."))
        path.mkdir(parents=True, exist_ok=True)
        text = f"{bad_import}\n" if module == bad_module else ""
        (path / "__init__.py").write_text(text)
    lines = ["[tool.importlinter]"]
    lines += [f"{k} = {_toml(v)}" for k, v in CONFIG.items() if k != "contracts"]
    for contract in CONTRACTS.values():
        lines.append("[[tool.importlinter.contracts]]")
        lines += [f"{k} = {_toml(v)}" for k, v in contract.items() if k != "ignore_imports"]
    (tmp_path / "pyproject.toml").write_text("\n".join(lines) + "\n")
    return tmp_path


@pytest.mark.parametrize(
    ("module", "statement", "broken"),
    [
        ("cpn.core", "import kubernetes", {"pure-core", "clients-in-adapters"}),
        ("cpn.core", "import kubernetes_asyncio", {"pure-core"}),
        ("cpn.core", "import structlog", {"pure-core"}),
        ("cpn.core", "import predictor", {"pure-core"}),
        ("cpn.core", "import testbed", {"pure-core"}),
        ("cpn.core", "from cpn import api", {"layers"}),
        ("cpn.api", "import kopf", {"clients-in-adapters"}),
        ("cpn.sim", "import requests", {"clients-in-adapters"}),
        ("cpn.runtime", "import prometheus_api_client", {"clients-in-adapters"}),
        ("cpn.runtime", "from cpn import adapters", {"layers"}),
        ("cpn.sim", "from cpn import runtime", {"layers"}),
        ("cpn.adapters", "import kopf", {"kopf-in-handlers"}),
        ("cpn.cli", "import kopf", {"kopf-in-handlers", "cli-through-adapters"}),
        ("cpn.cli", "import kubernetes", {"cli-through-adapters"}),
        ("cpn.__main__", "import requests", {"cli-through-adapters"}),
        ("cpn.cli", "from cpn import adapters", set()),
        ("cpn.cli", "from cpn import handlers", set()),
        ("predictor", "from cpn import core", {"predictor-alone"}),
        ("cpn.adapters", "import kubernetes", set()),
        ("cpn.handlers", "import kopf", set()),
        ("cpn.sim", "import predictor", set()),
    ],
)
def test_a_contract_catches_a_bad_import(tmp_path, module, statement, broken):
    """One bad import breaks exactly the contracts meant to catch it; allowed ones pass."""
    code, verdicts = _lint(_tree(tmp_path, module, statement), str(tmp_path))
    assert {cid for cid, verdict in verdicts.items() if verdict == "BROKEN"} == broken
    assert (code == 0) == (not broken)


@pytest.mark.parametrize(
    ("path", "banned"),
    [
        ("operator/cpn/runtime/probe.py", True),
        ("operator/cpn/adapters/probe.py", False),
    ],
)
def test_the_runtime_reads_no_system_clock(path, banned):
    """ruff bans time.monotonic and time.time inside cpn.runtime (the Clock port instead),
    and only there."""
    source = "import time\nfrom time import monotonic\n\nA = time.time()\nB = monotonic()\n"
    done = _run(
        [sys.executable, "-m", "ruff", "check", "--stdin-filename", path, "-"], ROOT, stdin=source
    )
    found = re.findall(r"`(time\.\w+)` is banned", done.stdout)
    assert sorted(found) == (["time.monotonic", "time.time"] if banned else [])
    assert (done.returncode != 0) == banned
