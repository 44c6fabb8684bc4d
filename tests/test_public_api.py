"""The public surface, pinned: what each public module exports, by name.

Adding, renaming or removing a public name is a decision, so it must show up here as a
diff; everything outside these modules is internal (docs/architecture.md, "Public API").
The names are resolved in a fresh interpreter, so the lazy ``__getattr__`` paths run
for real instead of hitting names an earlier test already loaded.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

PUBLIC: dict[str, list[str]] = {
    "nonoka": [
        "Agent", "ChatModel", "CompletionContract", "LoopExtension", "MemoryBackend",
        "MemoryEntry", "Message", "ModelResponse", "Plan", "Ref", "RunContext", "RunResult",
        "Runner", "RuntimeLimits", "RuntimeUsage", "Session", "SessionState", "SessionStatus",
        "Step", "StepFailure", "StepResult", "StepStatus", "Termination", "Tool",
        "ToolApproval", "ToolCall", "ToolDecision", "ToolResult", "Usage", "WorkingMemory",
        "host_tool", "tool",
    ],
    "nonoka.errors": [
        "ConfigurationError", "CorruptSessionError", "Failure", "MissingExtraError",
        "ModelError", "ModelNotConfiguredError", "NonokaError", "SessionBusyError",
        "SessionConflictError", "StoreError", "ToolError", "ToolResultMismatchError",
        "UnsupportedVersionError", "WorkspaceError", "failure_of",
    ],
    "nonoka.events": [
        "EventSink", "ModelCalled", "RunEvent", "RunWarning", "TextDelta", "ToolCallFinished",
        "ToolCallRequested",
    ],
    "nonoka.extensions": ["ExtensionContext", "LoopExtension", "ToolApproval", "ToolDecision"],
    "nonoka.llm": ["AdoptsInflight", "ChatModel", "ModelResponse", "TextSink", "ToolSpec",
                   "Usage", "resolve_model"],
    "nonoka.provider": [
        "BridgeError", "BridgeTimeoutError", "DEFAULT_CANCEL_GRACE", "DEFAULT_TIMEOUT",
        "EventCallback", "ID_FILE_NAME", "MessageLike", "NonokaProvider", "ProviderResult",
        "ProviderStream", "ToolLike", "clear_session_id", "default_command", "id_file_path",
        "is_plausible_session_id", "read_session_id", "write_session_id",
    ],
    "nonoka.store": [
        "CheckpointStore", "EventLog", "MemoryCheckpointStore", "MemoryRecordStore",
        "PostgresCheckpointStore", "PostgresRecordStore", "ProjectStores",
        "SQLiteCheckpointStore", "SQLiteRecordStore", "SessionIndex", "SessionLeases",
        "hold_lease", "new_lease_owner", "open_project_stores",
    ],
    "nonoka.testing": ["FunctionModel", "ModelRequestRecord", "ScriptExhaustedError",
                       "ScriptedModel", "call", "calls", "text"],
    "nonoka.testing.server": ["Delay", "DropConnection", "HttpError", "ScriptedOpenAIServer",
                              "Step", "load_script", "main", "step_from_json"],
}

# In a fresh interpreter, per module: __all__, whether dir() lists every name before any
# is touched, the names that do not resolve, and what an unknown name raises.
PROBE = """
import importlib, json, sys
report = {}
for name in json.loads(sys.argv[1]):
    module = importlib.import_module(name)
    exported = list(module.__all__)
    listed = set(dir(module))
    missing = [n for n in exported if n not in listed]
    broken = []
    for n in exported:
        try:
            getattr(module, n)
        except Exception as exc:
            broken.append(f"{n}: {type(exc).__name__}: {exc}")
    try:
        getattr(module, "surely_not_public")
        unknown = "resolved"
    except AttributeError:
        unknown = "AttributeError"
    report[name] = {"all": exported, "missing_from_dir": missing, "broken": broken,
                    "unknown": unknown}
print(json.dumps(report))
"""


@pytest.fixture(scope="module")
def probed() -> dict[str, dict[str, object]]:
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps(sorted(PUBLIC))],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    report: dict[str, dict[str, object]] = json.loads(done.stdout)
    return report


def test_the_pinned_lists_are_sorted_and_unique() -> None:
    for module, names in PUBLIC.items():
        assert names == sorted(set(names)), module


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_a_public_module_exports_exactly_the_pinned_names(
        probed: dict[str, dict[str, object]], module: str) -> None:
    exported = probed[module]["all"]
    assert isinstance(exported, list)
    assert sorted(exported) == PUBLIC[module]
    assert len(exported) == len(set(exported)), f"{module}.__all__ repeats a name"


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_every_public_name_resolves_and_dir_lists_it(
        probed: dict[str, dict[str, object]], module: str) -> None:
    assert probed[module]["broken"] == []
    assert probed[module]["missing_from_dir"] == []
    assert probed[module]["unknown"] == "AttributeError"
