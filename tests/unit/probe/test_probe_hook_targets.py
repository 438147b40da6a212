"""SGLang's own plugin loader finds the probe and patches the real 0.5.23 classes.

These fail if a hook target is renamed or removed upstream: the gate would otherwise see only a
"Failed to apply hooks" log line and a report with nulls.
"""

from __future__ import annotations

import inspect
import pkgutil

import pytest

pytestmark = pytest.mark.sglang
import sglang  # noqa: E402,F401 - needs sglang==0.5.23 (requirements/sglang-cpu.txt); missing is an error, never a skip

from sparkgate_probe import plugin  # noqa: E402
from sparkgate_probe.plugin import HOOK_TARGETS, attached_hooks  # noqa: E402

TARGETS = sorted(HOOK_TARGETS)


def test_the_four_documented_targets_are_hooked():
    assert sorted(
        [
            "sglang.srt.model_executor.model_runner.ModelRunner.load_model",
            "sglang.srt.speculative.eagle_worker_v2.EagleDraftWorker.init_lm_head",
            "sglang.srt.speculative.dspark_components.dspark_worker_v2.DSparkWorkerV2.__init__",
            "sglang.srt.managers.scheduler_components.internal_state.SchedulerInternalStateController.get_internal_state",
        ]
    ) == TARGETS


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: ".".join(t.split(".")[-2:]))
def test_target_resolves_to_a_plain_method_of_a_class(target):
    owner_path, attr = target.rsplit(".", 1)
    owner = pkgutil.resolve_name(owner_path)
    assert inspect.isclass(owner)
    # A plain function in the class dict: HookRegistry wraps it with its AFTER wrapper as-is.
    assert inspect.isfunction(owner.__dict__[attr])
    assert pkgutil.resolve_name(target) is owner.__dict__[attr]


def test_dspark_worker_still_exposes_what_the_hook_reads():
    """The DSpark hook reads worker.target_worker (BaseSpecWorker's property) and worker.draft_model, which
    __init__ sets before it shares (or keeps) the drafter's LM head."""
    from sglang.srt.speculative.dspark_components.dspark_worker_v2 import DSparkWorkerV2

    assert isinstance(inspect.getattr_static(DSparkWorkerV2, "target_worker"), property)
    init_source = inspect.getsource(DSparkWorkerV2.__init__)
    assert "self.draft_model = " in init_source
    assert "attach_shared_modules(" in init_source


def test_model_runner_still_tells_target_from_draft():
    from sglang.srt.model_executor.model_runner import ModelRunner

    assert "is_draft_worker" in inspect.signature(ModelRunner.__init__).parameters


def test_load_plugins_discovers_the_probe_and_wraps_the_real_methods(sandbox, report):
    sandbox.load_plugins("engagement_probe")

    for target in TARGETS:
        owner, attr = sandbox.owner_and_attr(target)
        live = owner.__dict__[attr]
        assert live is not sandbox.originals[target], f"{target} was not patched"
        assert live.__wrapped__ is sandbox.originals[target]
        assert target in sandbox.registry._patched
    assert sorted(report.snapshot()["hooks_registered"]) == TARGETS
    assert attached_hooks() == {target: True for target in TARGETS}


def test_load_plugins_skips_the_probe_when_sglang_plugins_names_another(sandbox, report):
    sandbox.load_plugins("some_other_plugin")

    for target in TARGETS:
        owner, attr = sandbox.owner_and_attr(target)
        assert owner.__dict__[attr] is sandbox.originals[target]
    assert report.snapshot()["hooks_registered"] == []
    assert attached_hooks() == {target: False for target in TARGETS}


def test_a_target_sglang_cannot_patch_shows_in_hooks_attached(sandbox, report, monkeypatch):
    missing = "sglang.srt.model_executor.model_runner.ModelRunner.load_model_renamed_upstream"
    monkeypatch.setitem(HOOK_TARGETS, missing, plugin.hooks.after_load_model)

    sandbox.load_plugins("engagement_probe")  # SGLang only logs "Failed to apply hooks"

    attached = attached_hooks()
    assert attached[missing] is False
    assert all(attached[target] for target in TARGETS)
    assert missing in report.snapshot()["hooks_registered"]
