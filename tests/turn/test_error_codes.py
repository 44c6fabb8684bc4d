"""Error codes live on the errors: one tree, one mapping, the protocol's codes.

Every ``NonokaError`` subclass anywhere in nonoka must be named in the tree of
``nonoka.errors``'s docstring, next to the code it carries, and every code must be one
the protocol defines, retryable exactly when the protocol says so.
"""

from __future__ import annotations

import importlib
import pkgutil
import re

import pytest

import nonoka
from nonoka import errors
from nonoka.errors import (
    ConfigurationError,
    CorruptSessionError,
    Failure,
    ModelError,
    ModelNotConfiguredError,
    NonokaError,
    SessionBusyError,
    SessionConflictError,
    StoreError,
    ToolError,
    ToolResultMismatchError,
    UnsupportedVersionError,
    WorkspaceError,
    failure_of,
)
from nonoka.protocol import frames, values
from nonoka.turn import outcome


def every_nonoka_error() -> list[type[NonokaError]]:
    """Every subclass of ``NonokaError`` defined in nonoka, after importing all of it."""
    for module in pkgutil.walk_packages(nonoka.__path__, "nonoka."):
        if not module.name.endswith("__main__"):
            importlib.import_module(module.name)
    found: list[type[NonokaError]] = []
    todo: list[type[NonokaError]] = [NonokaError]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return [cls for cls in found if cls.__module__.startswith("nonoka.")]


def tree_codes() -> dict[str, str]:
    """``{class name: code}`` as the docstring's tree shows them."""
    doc = errors.__doc__ or ""
    return dict(re.findall(r"[─└├]\s*(\w+)\s+(\(per line\)|\w+)", doc) +
                re.findall(r"^\s{4}(NonokaError)\s+(\w+)", doc, re.MULTILINE))


def test_every_error_class_is_named_in_the_tree() -> None:
    classes = every_nonoka_error()
    assert {"ProtocolError", "BridgeError", "WorkspaceError"} <= {c.__name__ for c in classes}
    missing = [cls.__name__ for cls in classes
               if not re.search(rf"\b{cls.__name__}\b", errors.__doc__ or "")]
    assert not missing, f"add these to the tree in nonoka/errors.py: {missing}"


def test_the_tree_shows_each_class_with_its_code() -> None:
    shown = tree_codes()
    for cls in every_nonoka_error():
        assert cls.__name__ in shown, f"{cls.__name__} is not a node of the tree"
        if shown[cls.__name__].startswith("("):
            continue  # "(per line)": the instance names it
        assert shown[cls.__name__] == cls.code, cls


def test_every_code_is_the_protocols_and_retryable_as_it_says() -> None:
    for cls in every_nonoka_error():
        assert cls.code in values.ERROR_CODES, cls
        if cls is not ModelError:  # decides per error
            assert cls.retryable == (cls.code in values.RETRYABLE_ERROR_CODES), cls


@pytest.mark.parametrize(("error", "code", "retryable"), [
    (ConfigurationError("bad"), "invalid_request", False),
    (ModelNotConfiguredError("none"), "model_not_configured", False),
    (WorkspaceError("gone"), "invalid_cwd", False),
    (ToolError("broke"), "tool_error", False),
    (ToolResultMismatchError("nobody asked"), "tool_result_mismatch", False),
    (ModelError("429", retryable=True), "model_error", True),
    (ModelError("401"), "model_error", False),
    (StoreError("broke"), "store_error", False),
    (SessionConflictError("raced"), "session_conflict", True),
    (SessionBusyError("busy"), "session_busy", True),
    (CorruptSessionError("garbage"), "session_corrupt", False),
    (UnsupportedVersionError("from the future"), "store_error", False),
    (frames.ProtocolError(values.ErrorCode.INVALID_JSON, "not json"), "invalid_json", False),
])
def test_failure_of_reads_the_code_off_the_error(error: NonokaError, code: str,
                                                 retryable: bool) -> None:
    failure = failure_of(error)
    assert (failure.code, failure.retryable) == (code, retryable)
    assert failure.message.startswith(str(error))


def test_messages_carry_what_to_do() -> None:
    assert "free some space" in failure_of(StoreError("disk I/O error")).message
    assert "new conversation" in failure_of(CorruptSessionError("row 3 is garbage")).message
    assert failure_of(SessionBusyError("held by host:1:ab")).message == "held by host:1:ab"


def test_anything_else_is_an_internal_error_with_its_traceback(
        capsys: pytest.CaptureFixture[str]) -> None:
    try:
        raise KeyError("surprise")
    except KeyError as exc:
        failure = failure_of(exc)
    assert failure == Failure("internal_error",
                              "KeyError: 'surprise' (a bug in nonoka; stderr has the traceback)")
    assert "Traceback" in capsys.readouterr().err


def test_finish_reasons_are_the_protocols() -> None:
    assert outcome.FINISH_REASONS == values.FINISH_REASONS
