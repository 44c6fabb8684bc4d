"""How ``pytest -n N`` hands the tests to its workers.

pytest-xdist's own ``loadgroup`` puts tests marked ``xdist_group`` on one worker by
appending the group to each test's node id; pytest 9.2 keeps node ids where that
assignment no longer reaches, so the marks silently did nothing and a module's costly
module-scoped fixture (an ``opencode serve`` with four scripted endpoints, a browser) was
built again for nearly every test. This scheduler needs no node id rewritten: the
controller sees only node ids, so the modules that share one costly fixture are named
here, and the end-to-end tests, the longest, are started first so that none of them is
left running alone at the end.
"""

from __future__ import annotations

from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]

ONE_WORKER_MODULES = frozenset({
    "tests/hardening/test_credential_surfaces.py",
    "tests/opencode/test_host_links.py",
    "tests/opencode/test_settings.py",
    "tests/opencode/test_side_by_side.py",
    "tests/test_wheel.py",
    "tests/ui/test_browser.py",
    "tests/ui/test_cut_short.py",
    "tests/ui/test_live_and_actions.py",
    "tests/ui/test_media.py",
    "tests/ui/test_token.py",
})
"""Modules whose tests share a module-scoped fixture too costly to build once per worker."""

FIRST = ("tests/test_types.py", "tests/e2e/", "tests/opencode/", "tests/handoff/",
         "tests/serve/test_clients", "tests/ui/", "tests/faults/", "tests/serve/test_campaign")
"""Where the long tests are (the type check of the whole tree, real OpenCode, Codex,
Claude Code, a browser, kill campaigns): these start before the rest, in this order."""


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def work_order(nodeid: str) -> int:
    """The rank of a test's place in the queue (lower starts earlier)."""
    module = module_of(nodeid)
    for rank, prefix in enumerate(FIRST):
        if module.startswith(prefix):
            return rank
    return len(FIRST)


def unit_of(nodeid: str) -> str:
    """The unit of work a test is handed out in: its module's, for ``ONE_WORKER_MODULES``,
    else its own."""
    module = module_of(nodeid)
    return module if module in ONE_WORKER_MODULES else nodeid


class GroupedLoad(LoadScopeScheduling):  # type: ignore[misc]
    """``load`` scheduling, one test at a time, except that each module of
    ``ONE_WORKER_MODULES`` goes to one worker as a whole."""

    def _split_scope(self, nodeid: str) -> str:
        return unit_of(nodeid)
