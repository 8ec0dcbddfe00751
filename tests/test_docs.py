"""The docs that are generated or that name commands stay true to the code."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from tools.config_reference import SECTIONS, resolve_section, field_docs, render

ROOT = Path(__file__).resolve().parents[1]


def test_the_configuration_reference_is_up_to_date() -> None:
    committed = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert committed == render(), "docs/configuration.md is stale: run `make docs`"


def test_every_configuration_key_is_documented() -> None:
    for title, target, _ in SECTIONS:
        cls = resolve_section(target)
        docs = field_docs(cls)
        missing = [f.name for f in dataclasses.fields(cls) if f.init and not docs.get(f.name)]
        assert not missing, f"{title}: keys without a docstring: {missing}"


def test_field_docs_read_both_docstring_styles() -> None:
    @dataclasses.dataclass
    class Example:
        """An example.

        :param width: the width,
            over two lines.
        """

        width: int = 1
        height: int = 2
        """The height."""

    assert field_docs(Example) == {"width": "the width, over two lines.", "height": "The height."}


def _readme_commands(prefix: str, path: Path = ROOT / "README.md") -> list[str]:
    """Lines of a page's shell blocks, and its inline `code`, that start with `prefix`."""
    text = path.read_text(encoding="utf-8")
    lines = []
    # every fence pairs with the next (a ```python block's close is no shell block's opening)
    for language, block in re.findall(r"^```(\w*)\n(.*?)^```", text, re.DOTALL | re.MULTILINE):
        if language in ("", "bash", "sh"):
            lines += [line.split("#")[0].strip() for line in block.replace("\\\n", " ").splitlines()]
    lines += re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", text, flags=re.S))
    return sorted({line for line in lines if line.startswith(prefix + " ")})


def _subcommand(line: str) -> list[str]:
    """`trader data build NAME --x` -> ["data", "build"]: the words before the first argument."""
    words = line.split()[1:]
    names = []
    for word in words:
        if word.startswith("-") or not re.fullmatch(r"[a-z]+", word):
            break
        names.append(word)
        if names[0] not in GROUPS:
            break
    return names


GROUPS = ("data", "cluster", "experiment")
"""`trader` subcommands that are groups of their own subcommands."""


def test_every_trader_command_in_the_readme_exists() -> None:
    from podracer.cli import main

    commands = {tuple(_subcommand(line)) for line in _readme_commands("trader")}
    assert len(commands) >= 8, commands
    for command in sorted(commands):
        assert main([*command, "--help"]) == 0, f"`trader {' '.join(command)} --help` failed"


def test_every_make_target_in_the_readme_exists() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    targets = set(re.findall(r"^([a-z][a-z-]*):", makefile, re.M))
    named = {line.split()[1] for line in _readme_commands("make")}
    assert {"demo", "test"} <= named
    assert named <= targets, f"README names make targets the Makefile lacks: {named - targets}"


def _options(command: list[str]) -> set[str]:
    """Every option name (``--x``, ``-x``) that `trader COMMAND` accepts."""
    import typer

    from podracer.cli import app

    node = typer.main.get_command(app)
    for name in command:
        node = node.commands[name]
    return {opt for param in node.params for opt in (*param.opts, *param.secondary_opts)}


def test_every_trader_option_in_the_docs_exists() -> None:
    """The pages name only options the commands have (configuration.md once named
    `trader train --set`, which never existed)."""
    pages = [ROOT / "README.md", ROOT / "datasets" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    checked = 0
    for page in pages:
        for line in _readme_commands("trader", page):
            command = _subcommand(line)
            named = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", line))
            unknown = named - _options(command)
            assert not unknown, (
                f"{page.name}: `{line}` names {sorted(unknown)}, which `trader {' '.join(command)}` lacks"
            )
            checked += len(named)
    assert checked >= 10, checked
