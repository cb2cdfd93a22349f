"""The ``cpn`` entry point dispatches to sub-commands and refuses unknown ones."""

from cpn.cli import COMMANDS, main


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
