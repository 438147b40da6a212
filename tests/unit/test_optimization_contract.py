"""Each optimization lives in one place: its module declares its checks (with their stages), its re-checks,
its probe-report parts, the flags only it may set and its docs page, and evidence/, sentinel/ and rules.py
read all of it from the registry.

The proof is a do-nothing fourth optimization defined here: registered (module, REGISTRY entry, profile
section, profile file), its checks appear in the verdict against the simulator, in the sentinel's re-check
and in the generated catalog, without a line of evidence/, sentinel/ or rules.py knowing it.
"""

from __future__ import annotations

import json
import types

import pytest
from pydantic import create_model

from sparkgate import optimizations
from sparkgate.bundle import expectations as expectations_mod
from sparkgate.evidence import catalog, engine_checks, logs
from sparkgate.evidence.gather import Evidence
from sparkgate.evidence.results import CheckResult, checked
from sparkgate.evidence.stages import Stage
from sparkgate.evidence.verify import rechecked, run_checks, stage_of, verify
from sparkgate.frozen import Frozen
from sparkgate.optimizations import REGISTRY
from sparkgate.profile import loading as profiles
from sparkgate.profile import model
from sparkgate.sentinel import http as sentinel_http
from sparkgate.sentinel.service import Sentinel, SentinelConfig

SCALE = 0.05
CONTRACT = ("KEY", "DOCS", "Settings", "OWNED_ENV", "OWNED_FLAGS", "GATE_WOULD_MISS", "rules",
            "RULE_READS", "expectations", "CHECKS", "READS", "checks", "CONFIG_KEYS")


# --- the do-nothing optimization --------------------------------------------------------------------------


class NoopSettings(Frozen):
    enabled: bool = False


def noop_checks(ev: Evidence) -> list[CheckResult]:
    return [
        checked("noop.config_echo", ev.server_info is not None, "echo", "echo", "test", "none"),
        checked("noop.calibrated", ev.calibration is not None, "ran", "ran", "test", "none"),
    ]


def noop_start_rechecks(ctx) -> None:
    ctx.state["started"] = True


def noop_rechecks(ctx) -> list[CheckResult]:
    # Passes only when the sentinel started this module's re-check memory after the full verification.
    return [checked("noop.watch", ctx.state.get("started") is True, ctx.state, {"started": True}, "test", "none")]


def noop_module() -> types.ModuleType:
    module = types.ModuleType("noop")
    module.__dict__.update(
        KEY="noop", DOCS="noop.md", Settings=NoopSettings,
        OWNED_ENV=(), OWNED_FLAGS={}, GATE_WOULD_MISS="nothing",
        rules=lambda ctx: [], RULE_READS=(),
        expectations=lambda profile: {"requested": profile.optimizations.noop.enabled},
        CHECKS={"noop.config_echo": Stage.CONFIGURATION, "noop.calibrated": Stage.CALIBRATION,
                "noop.watch": Stage.RECHECK_ONLY},
        READS={"noop.config_echo": (), "noop.calibrated": (), "noop.watch": ()},
        checks=noop_checks,
        start_rechecks=noop_start_rechecks, rechecks=noop_rechecks,
        GAUGES={"sparkgate_noop_elapsed": ("Calibration time, from the noop module.", ("calibration", "elapsed_s"))},
        CONFIG_KEYS=("context_length",),
    )
    return module


@pytest.fixture
def noop_registered(monkeypatch):
    """The fourth optimization registered the way a real one is: REGISTRY, the profile's section, a profile."""
    monkeypatch.setitem(REGISTRY, "noop", noop_module())
    optimizations = model.optimizations_model(REGISTRY)
    profile_model = create_model("Profile", __base__=model.Profile, optimizations=(optimizations, optimizations()))
    monkeypatch.setattr(profiles, "Profile", profile_model)


@pytest.fixture
def noop_profile(noop_registered, tmp_path):
    path = tmp_path / "noop-test.yaml"
    path.write_text("name: noop-test\ndescription: baseline plus a do-nothing optimization\n"
                    f"extends: [{profiles.locate('baseline')}]\noptimizations:\n  noop:\n    enabled: true\n")
    return profiles.load(str(path))


# --- every registered module keeps the contract ------------------------------------------------------------


@pytest.mark.parametrize("key", sorted(REGISTRY))
def test_every_module_exposes_the_whole_contract(key):
    module = REGISTRY[key]
    assert [name for name in CONTRACT if not hasattr(module, name)] == []
    assert key == module.KEY and module.CHECKS and all(name.startswith((f"{key}.", "sentinel.")) for name in module.CHECKS)
    assert (catalog.README.parent / module.DOCS).is_file()


def test_every_declared_check_is_rechecked_or_declared_log_answers_or_calibration_only():
    table = catalog.declared()
    assert len(table) >= 30  # common + answers + the optimizations + re-check-only: the catalog sees all of them
    for entry in table.values():
        assert entry.stage.rechecked or entry.stage in (Stage.ENGINE_LOG, Stage.ANSWERS, Stage.CALIBRATION), entry
    assert {"engine.log", "answers.correct", "mtp.accept_length", "humming.log_signature"} <= {
        name for name, entry in table.items() if not entry.stage.rechecked}
    assert table["answers.correct"].runs_for == "every profile"


def test_every_emitted_check_is_declared():
    """Whatever the evidence, nothing run_checks emits falls outside the declarations (all optimizations on)."""
    expectations = {
        "engine": {"sglang_version": "0.5.23", "model_path": "/m", "served_model_name": "m", "architecture": "A"},
        "batch_size": 1, "calibration": {"prompts": 3, "time_budget_s": 10},
        "speed": {"min_decode_tok_s": 1.0, "must_beat_baseline": True, "baseline_decode_tok_s": 1.0},
        "requested": sorted(REGISTRY),
        "optimizations": {key: {"module_sharing_required": True, "resolved_algorithm": "EAGLE", "num_steps": 3,
                                "eagle_topk": 1, "num_draft_tokens": 4, "draft_model_class": "X",
                                "min_accept_length": 2.0} for key in REGISTRY},
    }
    emitted = {c.name for c in run_checks(Evidence(expectations=expectations))}
    assert emitted and emitted <= set(catalog.declared())
    assert {"humming.moe_layers_draft", "mtp.lm_head_module_shared", "engine.speed_floor"} <= emitted


def test_an_undeclared_check_fails_closed_and_is_rechecked(monkeypatch):
    stray = checked("engine.stray", True, 1, 1, "test", "a check nobody declared")
    monkeypatch.setattr(engine_checks, "run", lambda ev: [stray])
    [result] = [c for c in run_checks(Evidence(expectations={"requested": []})) if c.name == "engine.stray"]
    assert stage_of(result) is None and rechecked(result)
    assert result.passed is False and "declares no stage" in result.hint


def test_a_check_declared_twice_is_refused(monkeypatch):
    module = noop_module()
    module.CHECKS = {"humming.config_echo": Stage.HEALTH}
    module.READS = {"humming.config_echo": ()}
    monkeypatch.setitem(REGISTRY, "noop", module)
    with pytest.raises(catalog.DuplicateCheck, match="humming.config_echo"):
        catalog.declared()


def test_a_module_with_recheck_only_checks_has_its_own_rechecks():
    """part() reads a missing hook as "nothing of its own": a misspelt one would switch a module's re-checks off."""
    for module in REGISTRY.values():
        if Stage.RECHECK_ONLY in module.CHECKS.values():
            assert {"rechecks", "start_rechecks"} <= set(vars(module)), module.KEY
        # A near spelling of the same kind (a hook for a hook, data for data): fp8_lm_head's ENV constant is no env().
        near = {name for name, value in vars(module).items() if not name.startswith("_")
                and name not in optimizations.OPTIONAL
                and any(name.lower().rstrip("s") == part.lower().rstrip("s") and callable(value) == callable(absent)
                        for part, absent in optimizations.OPTIONAL.items())}
        assert not near, (module.KEY, near)


def test_optional_parts_are_their_documented_kinds_where_a_module_has_them():
    assert not set(optimizations.OPTIONAL) & set(CONTRACT)
    for module in REGISTRY.values():
        for name, absent in optimizations.OPTIONAL.items():
            own = optimizations.part(module, name)
            assert callable(own) if callable(absent) else isinstance(own, type(absent)), (module.KEY, name)
        assert set(optimizations.part(module, "LOAD_CENSUS_CHECKS")) <= set(module.CHECKS), module.KEY
    assert optimizations.part(REGISTRY["humming"], "rechecks")(None) == []  # left out: nothing of its own


def test_figures_name_checks_their_module_declares_and_the_sentinel_reads_them_from_there():
    from sparkgate.sentinel import page, state

    for module in optimizations.REGISTRY.values():
        for names in getattr(module, "FIGURES", {}).values():
            assert set(names) <= set(module.CHECKS), module.KEY
    assert state.PROBE_CHECKS == ("sentinel.accept_probe", "sentinel.dspark_accept_probe")
    assert state.CALIBRATION_ACCEPT_CHECKS == ("mtp.accept_length", "dspark.accept_length")
    assert dict((key, checks) for key, _, _, checks in page.PLOTS)["accept_length"] == (
        *state.PROBE_CHECKS, *state.CALIBRATION_ACCEPT_CHECKS)


def test_the_committed_catalog_is_fresh():
    assert catalog.with_catalog(catalog.README.read_text(encoding="utf-8")) == catalog.README.read_text(
        encoding="utf-8"), "stale: run `python -m sparkgate.evidence.catalog`"


# --- the fourth optimization, end to end -------------------------------------------------------------------


def test_the_new_optimization_appears_in_the_catalog(noop_registered):
    rows = {line.split("|")[1].strip(" `"): line for line in catalog.render().splitlines() if line.startswith("| `")}
    assert "2. identity and configuration | yes | `optimizations.noop.enabled` | [noop.md](noop.md)" in rows[
        "noop.config_echo"]
    assert "7. calibration | no" in rows["noop.calibrated"] and "sentinel re-check | yes" in rows["noop.watch"]


def test_the_new_optimization_is_in_the_profile_and_expectations(noop_profile):
    assert noop_profile.profile.requested() == ["noop"]
    built = expectations_mod.build(noop_profile, "sim", SCALE)
    assert built["requested"] == ["noop"] and built["optimizations"]["noop"] == {"requested": True}


def test_the_new_optimization_is_verified_and_rechecked(noop_profile, start_profile, tmp_path):
    sim = start_profile("baseline", scale=SCALE)  # the do-nothing optimization adds no flag and no env
    want = expectations_mod.build(noop_profile, "sim", SCALE)
    # A do-nothing optimization decodes at baseline speed, which a stacked profile must beat; the gate is
    # right to refuse that, but this test is about where the new checks land, so the baseline rule applies.
    want["speed"]["must_beat_baseline"] = False
    log_file = sim.log_dir / f"sim-{sim.port}.out"
    verdict = verify(sim.base_url, want, logs.from_file(str(log_file)))
    assert verdict.passed, [c.as_dict() for c in verdict.failures()]
    names = [c.name for c in verdict.checks]
    assert {"noop.config_echo", "noop.calibrated"} <= set(names)
    # Sorted by the declared stages: configuration before the log, calibration last.
    assert names.index("engine.identity") < names.index("noop.config_echo") < names.index("engine.log")
    assert names.index("engine.cuda_graph_passes") < names.index("noop.calibrated")
    recorded = verdict.engine["context_length"]  # the module's CONFIG_KEYS are recorded with the verdict
    assert recorded is not None and recorded == sim.server_info()["context_length"]

    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "expectations.json").write_text(json.dumps(want))
    meminfo = tmp_path / "meminfo"  # a healthy simulated host, not this machine's /proc/meminfo
    meminfo.write_text("MemTotal: 127604736 kB\nMemAvailable: 20971520 kB\nSwapTotal: 0 kB\nSwapFree: 0 kB\n")
    sentinel = Sentinel(SentinelConfig(sim.base_url, bundle, str(log_file), period_s=5.0,
                                       admin_key_file=str(tmp_path / "no-admin-key"), meminfo_path=str(meminfo)))
    sentinel.state.engine_startup_time = sentinel._server_info()["startup_time"]
    sentinel.weights = sentinel._weights()
    sentinel.start_module_rechecks()  # as right after a full verification
    sentinel.recheck()
    results = {c["name"]: c for c in sentinel.state.recheck["checks"]}
    assert results["noop.config_echo"]["passed"] and results["noop.watch"]["passed"]
    assert "noop.calibrated" not in results and "engine.log" not in results  # calibration and log: not re-run
    # This sim holds no admin key, so only the enforcement check may fail here.
    assert {name for name, c in results.items() if not c["passed"]} <= {"engine.admin_key_enforced"}

    sentinel.state.full = {"verification": verdict.as_dict()}
    metrics = sentinel_http._metrics(sentinel.state)
    assert f"sparkgate_noop_elapsed {verdict.calibration['elapsed_s']}" in metrics
    assert 'sparkgate_check_passed{check="noop.watch"} 1' in metrics
