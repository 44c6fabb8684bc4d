"""The public surface, pinned: what each public module exports, by name.

Adding, renaming or removing a public name is a decision, so it must show up here as a
diff; everything outside these modules is internal (docs/architecture.md, "Public API").
The names are resolved in a fresh interpreter, so the lazy ``__getattr__`` paths run
for real instead of hitting names an earlier test already loaded.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

PUBLIC: dict[str, list[str]] = {
    "nonoka": [
        "Agent", "ChatModel", "CompletionContract", "LoopExtension", "MemoryBackend",
        "MemoryEntry", "Message", "ModelResponse", "Plan", "Ref", "RunContext", "RunResult",
        "Runner", "RuntimeLimits", "RuntimeUsage", "Session", "SessionRuntimeState",
        "SessionState", "SessionStatus", "Step", "StepFailure", "StepResult", "StepStatus",
        "Termination", "Tool", "ToolApproval", "ToolCall", "ToolDecision", "ToolResult",
        "TraceEvent", "Usage", "WorkingMemory",
        "host_tool", "tool",
    ],
    "nonoka.errors": [
        "ConfigurationError", "CorruptSessionError", "Failure", "MissingExtraError",
        "ModelError", "ModelNotConfiguredError", "NonokaError", "SessionBusyError",
        "SessionConflictError", "StoreError", "ToolError", "ToolResultMismatchError",
        "UnsupportedVersionError", "WorkspaceError", "failure_of",
    ],
    "nonoka.events": [
        "EventSink", "ModelCalled", "ReasoningDelta", "RunEvent", "RunWarning", "TextDelta",
        "ToolCallFinished", "ToolCallRequested",
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
    "nonoka.testing.conformance": [
        "BranchingSuite", "CheckpointStoreSuite", "MediaHarness", "MediaSuite",
        "RecordStore", "RecordStoreSuite",
        "RecordsHarness", "RowsHarness", "SessionLeasesSuite", "StoreHarness", "StoredRows",
        "StoredRowsSuite",
    ],
    "nonoka.testing.server": [
        "ANTHROPIC_STRICT_MODES", "AnthropicReply", "AnthropicStep", "Delay", "DropConnection",
        "Flood", "HostedItem", "HttpError", "Linger", "Paced",
        "RESPONSES_STRICT_MODES", "ReasoningItem", "Reply", "ResponseFailed", "ResponsesReply",
        "STRICT_MODES", "ScriptedAnthropicServer", "ScriptedOpenAIServer",
        "ScriptedResponsesServer", "Step", "StreamError", "Thinking", "anthropic_overloaded",
        "anthropic_rate_limited", "context_length_exceeded", "insufficient_quota",
        "load_script", "main", "rate_limited", "step_from_json",
    ],
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


PUBLIC_PACKAGES = ("nonoka.errors", "nonoka.events", "nonoka.extensions", "nonoka.llm",
                   "nonoka.provider", "nonoka.store", "nonoka.testing")
"""Where a third party may import from (a module of one of these, or ``nonoka`` itself)."""


def _nonoka_imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module)
    return {n for n in found if n == "nonoka" or n.startswith("nonoka.")}


def test_the_conformance_suite_stands_on_public_modules_only() -> None:
    """A third-party store runs ``nonoka.testing.conformance``: everything it imports must
    be public, so a change to an internal package cannot break someone else's suite."""
    root = Path(__file__).resolve().parents[1] / "src" / "nonoka" / "testing" / "conformance"
    internal = {name for path in root.glob("*.py") for name in _nonoka_imports(path)
                if name != "nonoka" and not name.startswith(PUBLIC_PACKAGES)}
    assert internal == set()


def test_the_conformance_check_sees_an_internal_import(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from nonoka.runtime.runner import Runner\n")
    assert {n for n in _nonoka_imports(probe)
            if not n.startswith(PUBLIC_PACKAGES)} == {"nonoka.runtime.runner"}
