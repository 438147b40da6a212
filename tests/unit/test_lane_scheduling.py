"""How `invoke test` spreads the suite over pytest-xdist workers (tests/conftest.py lane_scope)."""

from __future__ import annotations

from tests.conftest import ONE_WORKER_MODULES, REPO, lane_scope


def test_one_worker_lanes_are_one_scope():
    assert lane_scope("tests/real/test_engine_starts.py::test_dense_generate_greedy") == "real"
    assert lane_scope("tests/fleet/test_rollout.py::test_baseline_to_every_host_is_admitted") == "fleet"


def test_a_listed_module_is_one_scope_and_others_spread_test_by_test():
    built = "tests/unit/test_v3_checkpoints.py"
    assert lane_scope(f"{built}::test_the_build_is_deterministic_and_random_shares_the_target") == built
    assert lane_scope(f"{built}::test_sglang_fills_every_parameter_of_target_and_draft_from_the_files[a::b]") == built
    assert lane_scope("tests/unit/no_such_file.py::test_x[1]") == "tests/unit/no_such_file.py::test_x[1]"


def test_every_listed_module_exists_and_builds_a_module_fixture():
    for module in ONE_WORKER_MODULES:
        assert 'scope="module"' in (REPO / module).read_text(), module
