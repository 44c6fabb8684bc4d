"""A process a test drops while it runs is killed when collected and named for the end
of the run, with no warning left for whichever test runs then (``tests/support/reaper.py``)."""

from __future__ import annotations

import os
import subprocess
import warnings

from tests.support import reaper


def test_a_dropped_running_process_is_reaped_and_named() -> None:
    process = subprocess.Popen(["sleep", "60"], stdout=subprocess.PIPE)
    pid = process.pid
    before = len(reaper.left_running)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a ResourceWarning here would be an error
        del process  # the last reference: collected now
    try:
        assert reaper.left_running[before:] == [
            ("tests/test_reaper.py::test_a_dropped_running_process_is_reaped_and_named",
             "['sleep', '60']")]
        assert not os.path.exists(f"/proc/{pid}")  # killed and waited for
    finally:
        del reaper.left_running[before:]  # this one was on purpose


def test_a_process_waited_for_is_not_named() -> None:
    before = len(reaper.left_running)
    process = subprocess.Popen(["true"])
    process.wait()
    del process
    assert len(reaper.left_running) == before
