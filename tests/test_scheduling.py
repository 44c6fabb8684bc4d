"""The scheduler ``pytest -n`` uses (``tests/support/scheduling.py``)."""

from __future__ import annotations

from pathlib import Path

from tests.support.scheduling import FIRST, ONE_WORKER_MODULES, unit_of, work_order

ROOT = Path(__file__).resolve().parents[1]


def test_every_module_kept_on_one_worker_exists() -> None:
    """A renamed module would silently lose its one worker (and build its fixture again
    for every test)."""
    assert [m for m in sorted(ONE_WORKER_MODULES) if not (ROOT / m).is_file()] == []


def test_one_worker_modules_are_one_unit_and_the_rest_one_test_each() -> None:
    grouped = sorted(ONE_WORKER_MODULES)[0]
    assert unit_of(f"{grouped}::test_a") == unit_of(f"{grouped}::test_b[x]") == grouped
    assert unit_of("tests/cli/test_lineage.py::test_a") != unit_of(
        "tests/cli/test_lineage.py::test_b")


def test_the_end_to_end_tests_start_first() -> None:
    assert work_order("tests/test_types.py::test_mypy_finds_no_type_errors") == 0
    assert work_order("tests/e2e/test_opencode.py::test_x") == 1
    assert work_order("tests/cli/test_lineage.py::test_x") == len(FIRST)
    assert all((ROOT / prefix).exists() or any(ROOT.glob(prefix + "*"))
               for prefix in FIRST)
