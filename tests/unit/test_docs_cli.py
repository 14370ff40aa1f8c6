"""docs/cli.md documents every command and option of ``fanfit``, and nothing the parsers lack.

GIVEN the argument parsers of :func:`fanfit.cli.build_parser` (the top-level one and one per
subcommand), WHEN docs/cli.md is read section by section (``## fanfit`` and ``## fanfit
COMMAND``), THEN every long option of every parser, every choice of an option and every
positional argument appears in its command's section, every subcommand has a section, and every
``--option`` a section names is an option of that command, so the reference cannot drift from
the code in either direction.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from fanfit.cli import build_parser
from fanfit.cli.common import command_parent

ROOT = Path(__file__).resolve().parents[2]
CLI_MD = ROOT / "docs" / "cli.md"


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


PARSER = build_parser()
COMMANDS = _subparsers(PARSER)
#: The options every command shares with the top-level parser (-v, --quiet), documented once
#: under ``## fanfit``.
SHARED = {o for a in command_parent()._actions for o in a.option_strings}


def _sections() -> dict[str, str]:
    """``'fanfit'`` / ``'fanfit estimate'`` -> the text of that ``##`` section of docs/cli.md."""
    text = CLI_MD.read_text(encoding="utf-8")
    parts = re.split(r"^## +(.+?) *$", text, flags=re.M)
    return {parts[i].strip("` "): parts[i + 1] for i in range(1, len(parts), 2)}


SECTIONS = _sections()


def _long_options(parser: argparse.ArgumentParser) -> list[str]:
    return [
        option
        for action in parser._actions
        for option in action.option_strings
        if option.startswith("--")
    ]


def test_every_subcommand_has_a_section_and_every_section_a_subcommand() -> None:
    # GIVEN the subcommands WHEN compared with the sections THEN they are the same set
    assert set(SECTIONS) == {"fanfit", *(f"fanfit {name}" for name in COMMANDS)}


def test_every_top_level_option_is_documented() -> None:
    # GIVEN the top-level parser WHEN its options are listed THEN `## fanfit` names each
    section = SECTIONS["fanfit"]
    for action in PARSER._actions:
        for option in action.option_strings:
            assert f"`{option}`" in section, f"docs/cli.md, ## fanfit: {option} is not documented"


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_long_option_of_a_subcommand_is_in_its_section(command) -> None:
    # GIVEN a subcommand's parser WHEN its long options are listed THEN each appears, in
    # backticks (alone or with its metavar), in the command's section of docs/cli.md
    section = SECTIONS[f"fanfit {command}"]
    missing = [
        option
        for option in _long_options(COMMANDS[command])
        if option != "--help"
        and option not in SHARED
        and not re.search(rf"`{re.escape(option)}(?: [^`]*)?`", section)
    ]
    assert not missing, f"docs/cli.md, ## fanfit {command}: undocumented {missing}"


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_choice_and_positional_of_a_subcommand_is_in_its_section(command) -> None:
    # GIVEN a subcommand's options with choices and its positional arguments WHEN listed THEN
    # every choice and every positional's name appears in the command's section
    section = SECTIONS[f"fanfit {command}"]
    for action in COMMANDS[command]._actions:
        if action.choices is not None:
            for choice in action.choices:
                assert f"`{choice}`" in section, (
                    f"docs/cli.md, ## fanfit {command}: choice {choice!r} of "
                    f"{'/'.join(action.option_strings) or action.dest} is not documented"
                )
        if not action.option_strings and action.dest != "help":
            name = action.metavar or action.dest.upper()
            assert f"`{name}`" in section, (
                f"docs/cli.md, ## fanfit {command}: positional {name} is not documented"
            )


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_section_names_only_options_its_command_has(command) -> None:
    # GIVEN the --options a section names WHEN compared with the command's parser THEN none is
    # stale (an option removed or renamed in the code)
    section = SECTIONS[f"fanfit {command}"]
    known = set(_long_options(COMMANDS[command])) | set(_long_options(PARSER))
    named = set(re.findall(r"(?<![\w-])--[a-z][a-zA-Z0-9-]*", section))
    assert not named - known, f"docs/cli.md, ## fanfit {command}: no such option {named - known}"
