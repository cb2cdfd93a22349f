"""The ``cpn`` entry point dispatches to sub-commands and refuses unknown ones."""

import importlib
import runpy
import sys
import tomllib
from pathlib import Path

import pytest

from cpn.cli.main import COMMANDS, main

ROOT = Path(__file__).resolve().parents[2]


def test_help_lists_every_command(capsys):
    """``cpn --help`` names each registered sub-command."""
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in COMMANDS:
        assert name in out


def test_unknown_command_exits_2(capsys):
    """An unknown sub-command is an error that says which."""
    assert main(["frobnicate"]) == 2
    assert "frobnicate" in capsys.readouterr().err


def test_every_command_module_has_main():
    """Each registered module imports and offers ``main(argv)`` (or the function named after
    its ``:``, as ``cpn.cli.actions:cancel``)."""
    for name, (target, _) in COMMANDS.items():
        module, _, function = target.partition(":")
        assert callable(getattr(importlib.import_module(module), function or "main")), name


def test_console_script_and_python_m_cpn_are_this_dispatcher(monkeypatch, capsys):
    """The ``cpn`` console script names :func:`cpn.cli.main.main`; ``python -m cpn`` runs it."""
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, attr = scripts["cpn"].partition(":")
    assert getattr(importlib.import_module(module), attr) is main
    monkeypatch.setattr(sys, "argv", ["cpn", "--help"])
    with pytest.raises(SystemExit) as done:
        runpy.run_module("cpn", run_name="__main__")
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: cpn COMMAND")
    assert all(f"  {name} " in out for name in COMMANDS)
