"""``nonoka help TOPIC``: the reference a command's help points to, shipped in the package.

A person who installed a wheel has no ``docs/`` folder, so a command's help never sends
them there; it names a topic here instead. Each topic is short and built from the same
constants the code uses (exit codes, providers, database URL forms), so it stays true.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType


def _exit_codes() -> str:
    from nonoka.cli.voice import EXIT_CODES

    lines = [f"  {code:<4} {meaning}" for code, meaning in EXIT_CODES]
    return "\n".join([
        "Every failure is one line on stderr: nonoka: <what happened>; <what to do>.",
        "A command run with --json also prints, on stdout:",
        '  {"error": {"code": "<kind>", "message": "<the same line>"}}',
        "",
        "Exit codes:",
        *lines,
    ])


def _database() -> str:
    from nonoka.store.project import URL_FORMS

    return "\n".join([
        "Sessions live in one database per project: .nonoka/sessions.db in the project",
        "directory (the current directory, or --dir DIR). NONOKA_DATABASE_URL names",
        "another one for every command and for the bridge; --db URL does it for one",
        "command. The forms:",
        f"  {URL_FORMS}.",
        "PostgreSQL needs the postgres extra (pip install '.[postgres]' in the clone).",
        "",
        "Back up with: nonoka db copy --to backup.db (verified, resumable), or",
        "  nonoka sessions export --all -o backup.jsonl (import with sessions import).",
        "",
        "A damaged file: commands that write refuse it, commands that read show what",
        "they still can. nonoka db check says what is wrong; export what is readable",
        "(nonoka sessions export --all -o rescue.jsonl), then restore the file from a",
        "backup, or move it aside and import rescue.jsonl into a new one.",
    ])


def _models() -> str:
    from nonoka.llm.wire import BASE_URL_VARIABLE, provider_lines

    return "\n".join([
        "A model is named PROVIDER:MODEL, e.g. openai:gpt-4o-mini. nonoka run takes it",
        "from --model, else NONOKA_MODEL, else model = \"...\" in .nonoka/config.toml;",
        "the bridge from the request's model (OpenCode: provider.nonoka.options.model),",
        "then the same two.",
        "",
        "Providers (each is sent only its own key; nothing is sent without a needed one):",
        *(f"  {line}" for line in provider_lines()),
        "",
        f"{BASE_URL_VARIABLE} points any provider at another OpenAI-compatible endpoint",
        "(e.g. http://127.0.0.1:8000/v1); a local server needs no key.",
    ])


def _statuses() -> str:
    return "\n".join([
        "What sessions list, sessions show and the ui say a session is doing:",
        "  created      stored, no turn has finished yet",
        "  running      a process runs a turn now (its pid and host are shown)",
        "  paused       waiting for the results of tool calls its host runs",
        "  completed    the last turn ended with an answer",
        "  failed       the last turn failed (sessions show has the error)",
        "  cancelled    the last turn was cancelled",
        "  interrupted  the process running a turn died mid-way; the next turn",
        "               (nonoka run --session ID ..., or the host) repairs it",
        "running and interrupted are read from the session's lease and timeline, not",
        "from the stored row, so they are true while a turn streams or after a crash.",
    ])


def _retention() -> str:
    return "\n".join([
        "nonoka sessions delete ID... removes sessions; nonoka sessions prune",
        "--older-than 30d removes old ones (completed, failed, cancelled by default).",
        "A session a process is running is always kept.",
        "",
        "To prune automatically, add to .nonoka/config.toml:",
        "  [retention]",
        "  older_than = \"90d\"                            # required",
        "  status = [\"completed\", \"failed\", \"cancelled\"]  # the default",
        "  keep_last = 20                                 # the default is 0",
        "nonoka run and nonoka sessions apply it at most once a day (the stamp is",
        ".nonoka/retention.stamp); the bridge never does.",
    ])


def _protocol() -> str:
    from importlib.resources import files

    schema = files("nonoka.protocol").joinpath("schema.json")
    return "\n".join([
        "nonoka bridge reads one JSON request per line on stdin and writes one JSON",
        "event per line on stdout (session, text, tool calls, usage, errors, finish);",
        "logs go to stderr. A host such as OpenCode spawns it for every model step; the",
        "session lives in the project's database, so only the session id crosses.",
        "",
        "The JSON Schema of every frame ships with nonoka:",
        f"  {schema}",
        "nonoka opencode init sets OpenCode up to use it.",
    ])


TOPICS: Mapping[str, tuple[str, Callable[[], str]]] = MappingProxyType({
    "database": ("where sessions are stored, --db/--dir, backups, damage", _database),
    "exit-codes": ("how failures are reported, and the exit codes", _exit_codes),
    "models": ("providers, their key variables and endpoints", _models),
    "protocol": ("what nonoka bridge reads and writes", _protocol),
    "retention": ("deleting and pruning sessions, automatically too", _retention),
    "statuses": ("what a session's status means", _statuses),
})
"""Topic name: (one line for the list, the text); read-only."""


def topic_list() -> str:
    width = max(len(name) for name in TOPICS)
    return "\n".join(f"  {name:<{width}}  {line}" for name, (line, _) in TOPICS.items())


def topic_text(name: str) -> str | None:
    found = TOPICS.get(name)
    return None if found is None else found[1]()
