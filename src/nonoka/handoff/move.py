"""The hand-off itself: a branch of the session for the next agent, and that agent's
transcript of the whole conversation.

The branch shares the session's first ``at`` entries (no copy) and names, as its host
conversation, the session id the next agent will send (``claude-code:<id>`` or
``codex:<id>``, as ``nonoka serve`` reads them; OpenCode's own ``ses_…`` id, as its
nonoka provider sends it to the bridge) — made the owner's own when the session is a
``nonoka serve`` key owner's, as the server names that owner's requests. The agent's
first request therefore lands on the branch by its identity, before anything is judged
by content, and since it resends the transcript it was given, the branch's
conversation goes on from there.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

from nonoka.bridge.choose import OWNER_SCOPE_KEY
from nonoka.errors import ConfigurationError
from nonoka.handoff import claude, codex, opencode
from nonoka.handoff.conversation import carried, check_answered
from nonoka.serve.chat import owned_name  # the one rule for an owner's names
from nonoka.serve.lines import line_signal
from nonoka.serve.messages import claude_session
from nonoka.state.entries import MemoryEntry
from nonoka.store.project import ProjectStores
from nonoka.store.records import SessionRecord
from nonoka.turn.lineage import fork_session

HANDOFF_KEY = "handoff"
"""Index-row metadata of a hand-off's branch: where it came from and to which agent."""


@dataclass(frozen=True)
class Target:
    """An agent a session can be handed to."""

    name: str
    binary: str
    """Its command."""
    home_variable: str
    """The environment variable naming the directory it keeps its sessions in."""
    default_home: str
    """That directory when the variable is unset (under the user's home; for OpenCode,
    where the export to import is written, under the directory it runs in)."""
    signal: Callable[[str], str | None]
    """The host conversation name ``nonoka serve`` gives the agent's session id."""
    resume: Callable[[str], list[str]]
    """The command that opens the agent on its session id."""
    new_id: Callable[[datetime], str] = lambda now: str(uuid.uuid4())
    """A new session id of the agent's kind."""


TARGETS: Final[Mapping[str, Target]] = MappingProxyType({
    "claude": Target("claude", "claude", "CLAUDE_CONFIG_DIR", ".claude",
                     lambda sid: claude_session({"x-claude-code-session-id": sid}, {}),
                     lambda sid: ["claude", "--resume", sid]),
    "codex": Target("codex", "codex", "CODEX_HOME", ".codex",
                    lambda sid: line_signal({"session_id": sid}, {}),
                    lambda sid: ["codex", "resume", sid]),
    "opencode": Target("opencode", "opencode", "", ".nonoka/handoff", lambda sid: sid,
                       lambda sid: ["opencode", "--session", sid], opencode.session_id),
})
"""The agents a session can be handed to, by ``--to`` name (read-only)."""


@dataclass(frozen=True)
class HandOff:
    """What a hand-off made."""

    source: str
    branch: str
    at: int
    target: str
    agent_session: str
    """The next agent's session id (its ``--resume`` argument)."""
    transcript: Path
    carried: int
    """The entries the transcript holds (the system prompts left out)."""

    @property
    def command(self) -> list[str]:
        return TARGETS[self.target].resume(self.agent_session)

    @property
    def before(self) -> list[str] | None:
        """What to run first: OpenCode imports the export into its own database."""
        return ["opencode", "import", str(self.transcript)] if self.target == "opencode" \
            else None

    def as_json(self) -> dict[str, Any]:
        return {"source": self.source, "branch": self.branch, "at": self.at,
                "to": self.target, "agent_session": self.agent_session,
                "transcript": str(self.transcript), "carried": self.carried,
                "before": self.before, "command": self.command}


def home_of(target: Target, environ: dict[str, str], user_home: Path, cwd: Path) -> Path:
    """Where ``target`` keeps its sessions in this environment (for OpenCode: where its
    export is written, in the directory it will run in)."""
    named = environ.get(target.home_variable, "").strip() if target.home_variable else ""
    if named:
        return Path(named)
    return (cwd if target.name == "opencode" else user_home) / target.default_home


def _written(target: str, kept: list[MemoryEntry], agent_id: str, home: Path, cwd: Path,
             now: datetime, record: SessionRecord | None) -> Path:
    if target == "claude":
        model = record.model if record is not None else ""
        return claude.write(claude.transcript(kept, agent_id, cwd, now, model), home, cwd,
                            agent_id)
    if target == "opencode":
        title = record.title if record is not None else ""
        return opencode.write(opencode.export(kept, agent_id, cwd, now, title), home)
    return codex.write(codex.rollout(kept, agent_id, cwd, now), home, agent_id, now)


async def hand_off(stores: ProjectStores, source: str, target: str, *, home: Path,
                   cwd: Path, at: int | None = None, now: datetime | None = None) -> HandOff:
    """Hand session ``source`` (its first ``at`` entries, default all) to ``target``:
    write the agent's transcript under ``home`` for a run in ``cwd``, and make the
    branch its first request lands on."""
    if target not in TARGETS:
        raise ConfigurationError(f"unknown agent {target!r}; choose one of "
                                 f"{', '.join(TARGETS)}")
    state = await stores.checkpoints.load_session(source)
    if state is None:
        raise ConfigurationError(f"session {source} is not stored in this project")
    entries = list(state.memory_entries)
    point = len(entries) if at is None else at
    if not 0 <= point <= len(entries):
        raise ConfigurationError(f"--at {point}: the session has {len(entries)} entries")
    kept = entries[:point]
    if not carried(kept):
        raise ConfigurationError(f"the first {point} entries hold no conversation to hand "
                                 "off")
    check_answered(kept, point)
    record = await stores.index.get_session(source)
    spec = TARGETS[target]
    moment = now or datetime.now(UTC)
    agent_id = spec.new_id(moment)
    signal = spec.signal(agent_id)
    assert signal is not None
    salt = record.metadata.get(OWNER_SCOPE_KEY) if record is not None else None
    if isinstance(salt, str) and salt and target != "opencode":
        signal = owned_name(salt, signal)  # a key owner's session: that owner's name
        # (OpenCode's requests come through the bridge, which serves the local owner)
    path = _written(target, kept, agent_id, home, cwd, moment, record)
    try:
        branch = await fork_session(stores, source, point, reason=f"handoff to {target}",
                                    metadata={"host_session_id": signal, HANDOFF_KEY: {
                                        "from": source, "at": point, "to": target,
                                        "agent_session": agent_id}})
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return HandOff(source, branch, point, target, agent_id, path, len(carried(kept)))
