"""Every ``--help`` the ``nonoka`` command has, rendered and read as a person would.

No line wider than 100 characters, no short help cut with an ellipsis, the same short
option meaning the same thing everywhere, every command that opens a database offering
``--dir``/``--db`` and naming ``NONOKA_DATABASE_URL``, and every pointer to more reading
naming something installed (``nonoka help TOPIC``), never the repository's ``docs/``.
"""

from __future__ import annotations

from collections.abc import Iterator

import click
import pytest
from click.testing import CliRunner

from nonoka.cli.commands import cli
from nonoka.cli.topics import TOPICS
from nonoka.llm.wire import PROVIDERS

OPENS_A_DATABASE = {"run", "sessions list", "sessions show", "sessions fork", "sessions handoff",
                    "sessions search", "sessions export", "sessions import", "sessions delete",
                    "sessions prune", "db copy", "db check", "db vacuum", "db stats", "ui",
                    "serve", "serve keys add", "serve keys list", "serve keys revoke"}


def commands(group: click.Group = cli, path: tuple[str, ...] = ()
             ) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    """Every command and group under ``group``, with its path of names."""
    yield path, group
    for name in group.list_commands(click.Context(group)):
        command = group.get_command(click.Context(group), name)
        assert command is not None
        if isinstance(command, click.Group):
            yield from commands(command, (*path, name))
        else:
            yield (*path, name), command


ALL = list(commands())


def render(path: tuple[str, ...]) -> str:
    result = CliRunner().invoke(cli, [*path, "--help"], terminal_width=80, prog_name="nonoka")
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize(("path", "command"), ALL,
                         ids=[" ".join(p) or "nonoka" for p, _ in ALL])
def test_the_help_reads_whole(path: tuple[str, ...], command: click.Command) -> None:
    text = render(path)
    assert not [line for line in text.splitlines() if len(line) > 100], text
    assert "docs/" not in text, "a pointer to documentation a wheel does not install"
    if isinstance(command, click.Group):
        listed = text.split("Commands:\n", 1)[1]
        for line in listed.splitlines():
            assert not line.rstrip().endswith(("...", "…")), f"cut short: {line}"
    for option in command.params:
        if isinstance(option, click.Option) and "-n" in option.opts:
            assert "--limit" in option.opts, f"-n is {option.opts} in {' '.join(path)}"


@pytest.mark.parametrize("name", sorted(OPENS_A_DATABASE))
def test_a_command_that_opens_a_database_offers_the_same_choice(name: str) -> None:
    text = render(tuple(name.split()))
    assert "--dir DIR" in text, text
    assert "--db" in text and "NONOKA_DATABASE_URL" in text, text


def test_the_set_of_commands_that_open_a_database_is_complete() -> None:
    known = {" ".join(p) for p, c in ALL  # a group that runs on its own (serve) counts
             if not isinstance(c, click.Group) or c.invoke_without_command}
    elsewhere = {"bridge", "demo", "help", "opencode init"}  # they keep their own database
    assert known == OPENS_A_DATABASE | elsewhere


def test_run_help_names_every_providers_variables() -> None:
    text = " ".join(render(("run",)).split())
    for name, (_, key) in PROVIDERS.items():
        assert f"{name}:" in text and key in text
    assert "OPENAI_BASE_URL" in text


def test_an_argument_that_an_option_replaces_is_shown_optional() -> None:
    usage = render(("sessions", "export")).splitlines()[0]
    assert usage == "Usage: nonoka sessions export [OPTIONS] [ID]...", usage


@pytest.mark.parametrize("topic", sorted(TOPICS))
def test_every_help_topic_prints(topic: str) -> None:
    result = CliRunner().invoke(cli, ["help", topic])
    assert result.exit_code == 0, result.output
    assert len(result.output.splitlines()) >= 5


def test_help_without_a_topic_lists_them() -> None:
    result = CliRunner().invoke(cli, ["help"])
    assert result.exit_code == 0
    for topic in TOPICS:
        assert f"  {topic} " in result.output
