"""Shared fixtures. Markers are registered in pyproject.toml and enforced with --strict-markers."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

# Shared fixtures come from one plugin, registered here once: conftests never import each other.
pytest_plugins = ["tests.plugins.fixtures"]

# No test is judged by the wall clock, Hypothesis's included: its per-example deadline (200 ms) and its too-slow
# health check fail a correct test on a busy host (CI's 2 cores under four lanes), so the suite's profile has neither.
try:
    import hypothesis as _hypothesis
except ImportError:  # a machine that runs only lanes without property tests (the GPU lane may lack it)
    _hypothesis = None
if _hypothesis is not None:
    _hypothesis.settings.register_profile(
        "sparkgate", deadline=None, suppress_health_check=[_hypothesis.HealthCheck.too_slow])
    _hypothesis.settings.load_profile("sparkgate")

# A developer's recorded bench floor must not change what the tests render and deploy.
__import__("os").environ.setdefault("SPARKGATE_BENCH_FLOOR_FILE", "")


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


collect_ignore = []
# tests/gpu runs on a CUDA machine only, by its own command (bash tests/gpu/run sets this); elsewhere it is not
# collected at all (its recorded evidence is asserted by tests/unit/test_gpu_records.py), never skipped.
if __import__("os").environ.get("SPARKGATE_GPU_LANE") != "1":
    collect_ignore.append("gpu")


# No skipped test is counted as passing: a run with skips fails (set SPARKGATE_ALLOW_SKIPS=1 for local
# partial runs). Tests that cannot run here must be deselected by marker, visibly, not skipped.
def pytest_sessionfinish(session, exitstatus):
    import os

    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = len(reporter.stats.get("skipped", [])) if reporter else 0
    if skipped and exitstatus == 0 and os.environ.get("SPARKGATE_ALLOW_SKIPS") != "1":
        reporter.write_line(f"sparkgate: {skipped} test(s) skipped; skips are failures here", red=True)
        session.exitstatus = 1


# `invoke test` runs the suite on pytest-xdist workers. A lane whose session fixtures hold one shared thing stays
# on one worker, in its own order: the real-SGLang lane (one server slot, tests grouped by launch) and the fleet
# lab (one set of SSH hosts). Everything else is spread over the workers test by test. (xdist's own
# `--dist loadgroup` does not group under pytest 9: it renames item._nodeid, which pytest 9 no longer reads.)
ONE_WORKER_LANES = {"real": "tests/real/", "fleet": "tests/fleet/"}


# Modules whose module-scoped fixture costs seconds (an SGLang import, a checkpoint or a wheel built): each is one
# scope, so that fixture runs once, not once on every worker that runs one of its tests.
ONE_WORKER_MODULES = frozenset({
    "tests/unit/test_v3_checkpoints.py", "tests/unit/test_dspark_drafter.py", "tests/unit/evidence/test_recording.py",
    "tests/unit/sim/test_packaging.py",
})


def lane_scope(nodeid: str) -> str:
    """The scheduling unit of a test: its lane for a one-worker lane, its module for ONE_WORKER_MODULES, else the test
    itself."""
    lane = next((lane for lane, prefix in ONE_WORKER_LANES.items() if nodeid.startswith(prefix)), None)
    module = nodeid.split("::", 1)[0]
    return lane or (module if module in ONE_WORKER_MODULES else nodeid)


@pytest.hookimpl(optionalhook=True)  # an xdist hook: this conftest also loads where xdist is absent (the sentinel)
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class LaneScheduling(LoadScopeScheduling):
        """xdist's scope scheduler (most tests first) with lanes as scopes, the one-worker lanes handed out before
        anything else: they are the longest, so each starts at once on a worker of its own."""

        def _split_scope(self, nodeid: str) -> str:
            return lane_scope(nodeid)

        def _assign_work_unit(self, node) -> None:
            for lane in reversed(ONE_WORKER_LANES):
                if lane in self.workqueue:
                    self.workqueue.move_to_end(lane, last=False)
            super()._assign_work_unit(node)

    return LaneScheduling(config, log)


# Summaries a lane wrote on its worker (tests/real: the SGLang launches), printed by the controller, which never
# loads that lane's conftest.
_WORKER_SUMMARIES: dict[str, list[str]] = {}


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    for title, lines in (getattr(node, "workeroutput", None) or {}).get("sparkgate_summaries", {}).items():
        _WORKER_SUMMARIES.setdefault(title, []).extend(lines)


# Busy seconds per xdist worker and per lane (setup + call + teardown of every test it ran): the longest worker is
# the suite's wall time, so this names what to shorten or spread.
_WORKER_BUSY: dict[str, dict[str, float]] = {}


def pytest_runtest_logreport(report):
    node = getattr(report, "node", None)  # set by xdist on the controller
    worker = getattr(getattr(node, "gateway", None), "id", None)
    if worker is None:
        return
    lane = lane_scope(report.nodeid)
    lane = lane if lane in ONE_WORKER_LANES else report.nodeid.split("/")[1] if "/" in report.nodeid else "other"
    busy = _WORKER_BUSY.setdefault(worker, {})
    busy[lane] = busy.get(lane, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter):
    for title, lines in _WORKER_SUMMARIES.items():
        terminalreporter.write_sep("-", title)
        for line in lines:
            terminalreporter.write_line(line)
    if _WORKER_BUSY:
        terminalreporter.write_sep("-", "busy seconds per worker (by directory or lane)")
        for worker, lanes in sorted(_WORKER_BUSY.items()):
            parts = ", ".join(f"{lane} {seconds:.0f}" for lane, seconds in sorted(lanes.items(), key=lambda x: -x[1]))
            terminalreporter.write_line(f"{worker}: {sum(lanes.values()):.0f} s ({parts})")
        totals: dict[str, float] = {}
        for lanes in _WORKER_BUSY.values():
            for lane, seconds in lanes.items():
                totals[lane] = totals.get(lane, 0.0) + seconds
        terminalreporter.write_sep("-", "seconds per lane (all workers)")
        terminalreporter.write_line(", ".join(f"{lane} {seconds:.0f} s" for lane, seconds in
                                              sorted(totals.items(), key=lambda x: -x[1])))
