"""``nonoka.faults``: free when unarmed, exact when armed, and cheap to import."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from nonoka.faults import FAULT_ENV, POINTS, TRACE_ENV
from tests.support.bridge import BRIDGE, Bridge, chat, user

SCRIPT = ("from nonoka import faults\n"
          "for name in ['a', 'b', 'a', 'a']:\n"
          "    faults.point(name)\n"
          "    print(name, flush=True)\n")


def python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in (FAULT_ENV, TRACE_ENV)}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**clean, **env}, timeout=60, check=False)


def test_unarmed_points_are_a_module_level_no_op() -> None:
    done = python("from nonoka import faults; print(faults.point is faults._noop)")
    assert done.stdout.strip() == "True"
    timing = python("import timeit; from nonoka import faults; "
                    "print(timeit.timeit(lambda: faults.point('x'), number=200_000))")
    assert float(timing.stdout) < 1.0, "200k unarmed calls should take well under a second"


def test_an_armed_point_kills_at_its_nth_occurrence(tmp_path: Path) -> None:
    trace = tmp_path / "trace"
    done = python(SCRIPT, **{FAULT_ENV: "a:2", TRACE_ENV: str(trace)})
    assert done.returncode == -signal.SIGKILL
    assert done.stdout.split() == ["a", "b"], "it ran past the armed point"
    assert trace.read_text().split() == ["a", "b", "a"]


def test_a_trace_lists_every_point_without_killing(tmp_path: Path) -> None:
    trace = tmp_path / "trace"
    done = python(SCRIPT, **{TRACE_ENV: str(trace)})
    assert done.returncode == 0
    assert trace.read_text().split() == ["a", "b", "a", "a"]
    assert oct(trace.stat().st_mode & 0o777) == oct(0o600)


def test_a_malformed_spec_fails_loudly() -> None:
    for spec in ("a", "a:0", "a:x", ":3"):
        done = python("import nonoka.faults", **{FAULT_ENV: spec})
        assert done.returncode != 0 and "expected <point>:<n>" in done.stderr, spec


def test_importing_faults_adds_nothing_but_os() -> None:
    code = ("import sys; before = set(sys.modules); import nonoka.faults; "
            "print(sorted(set(sys.modules) - before))")
    base = python("import nonoka; " + code.replace("import nonoka.faults", "pass"))
    done = python("import nonoka; " + code)
    added = set(json.loads(done.stdout.replace("'", '"'))) - {"__future__"}
    assert added == {"nonoka.faults"}, done.stdout  # (every other module loads __future__)
    assert base.returncode == 0


def test_a_bridge_turn_reaches_the_documented_points(bridge: Bridge,
                                                     scripted: list[object]) -> None:
    from nonoka.testing import text

    scripted.append(text("hello"))
    trace = bridge.project.parent / "trace"
    line = json.dumps({"cwd": str(bridge.project), **chat([user("hi")])}).encode() + b"\n"
    done = subprocess.run(BRIDGE, input=line, capture_output=True, cwd=bridge.project,
                          env={**bridge.env, TRACE_ENV: str(trace)}, timeout=60, check=False)
    assert done.returncode == 0, done.stderr.decode()
    reached = trace.read_text().split()
    assert set(reached) <= set(POINTS)
    assert reached.index("model.call.before") < reached.index("model.call.after")
    for name in ("checkpoint.save.before", "index.update.after", "event.append.after",
                 "bridge.send"):
        assert name in reached
