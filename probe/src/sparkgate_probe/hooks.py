"""The AFTER hooks SGLang runs for the probe.

HookRegistry calls an AFTER hook as ``hook(result, self, *args, **kwargs)``
and replaces the method's result with any non-None return value, so every
hook here returns None. A hook must never raise into SGLang: failures are
recorded in the report's ``errors`` and logged, and the missing facts stay
null, which the gate treats as "not proven".
"""

from __future__ import annotations

import functools
import pkgutil
from collections.abc import Callable
from typing import Any

from sparkgate_probe import facts
from sparkgate_probe.report import LOG_PREFIX, REPORT, log_error, log_fact, logger


class ProbeError(RuntimeError):
    """A live object did not look the way the probe expects."""


def never_raise(event: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    def decorate(hook: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(hook)
        def guarded(*args: Any, **kwargs: Any) -> None:
            try:
                hook(*args, **kwargs)
            except Exception as exc:  # anything from the probe must stay in the probe
                REPORT.record_error(event, exc)
                log_error(event, exc)
            return None

        return guarded

    return decorate


def _fused_moe_class() -> type:
    # Imported lazily: the plugin module itself must load without sglang's
    # heavy layer modules, and by the time a model is loaded they are imported.
    from sglang.srt.layers.moe.fused_moe_triton.layer import FusedMoE

    return FusedMoE


def _role_of(runner: Any) -> str:
    is_draft = getattr(runner, "is_draft_worker", None)
    if not isinstance(is_draft, bool):
        raise ProbeError(f"runner.is_draft_worker is {is_draft!r}, expected a bool")
    return "draft" if is_draft else "target"


@never_raise("load_model")
def after_load_model(result: Any, runner: Any, *args: Any, **kwargs: Any) -> None:
    """Record model class, LM head and MoE census for the target or the draft."""
    role = _role_of(runner)
    REPORT.note_called(f"load_model/{role}")
    model = runner.model
    record = facts.describe_model(model, getattr(model, "lm_head", None), _fused_moe_class())
    REPORT.record_role(role, record)
    log_fact("load_model", role=role, **record)


def _record_sharing(event: str, target_model: Any, draft_model: Any) -> None:
    """Whether the draft now projects through the target's LM-head module, and both role records again:
    the share happens after both load_model calls, so the draft's head may just have been replaced."""
    from sglang.srt.lora.layers import unwrap_lora_layer

    # The same unwrapping SGLang applies to the target's head before it hands it to the draft.
    target_head = unwrap_lora_layer(getattr(target_model, "lm_head", None))
    draft_head = getattr(draft_model, "lm_head", None)
    sharing = facts.lm_head_sharing(target_head, draft_head)
    REPORT.record_sharing(sharing)
    fused_moe_cls = _fused_moe_class()
    target = facts.describe_model(target_model, target_head, fused_moe_cls)
    draft = facts.describe_model(draft_model, draft_head, fused_moe_cls)
    REPORT.record_role("target", target)
    REPORT.record_role("draft", draft)
    log_fact(event, lm_head_sharing=sharing, target_lm_head=target["lm_head"], draft_lm_head=draft["lm_head"])


@never_raise("init_lm_head")
def after_init_lm_head(result: Any, worker: Any, *args: Any, **kwargs: Any) -> None:
    """EAGLE/NEXTN: the draft worker has taken (or not) the target's embedding and head."""
    REPORT.note_called("init_lm_head")
    _record_sharing("init_lm_head", worker.target_worker.model_runner.model, worker.draft_runner.model)


@never_raise("dspark_worker_init")
def after_dspark_worker_init(result: Any, worker: Any, *args: Any, **kwargs: Any) -> None:
    """DSpark: DSparkWorkerV2.__init__ has loaded the drafter and either attached the target's embedding and
    LM head (attach_shared_modules) or kept the drafter's checkpoint-local ones. Either way the record says
    which, read from the live modules rather than from the branch SGLang took."""
    REPORT.note_called("dspark_worker_init")
    draft_model = getattr(worker, "draft_model", None)
    if draft_model is None:
        # Pipeline stages other than the last host no draft; at pp 1 this means the draft never loaded.
        raise ProbeError("DSparkWorkerV2 has no draft_model after __init__")
    _record_sharing("dspark_worker_init", worker.target_worker.model_runner.model, draft_model)


@never_raise("get_internal_state")
def after_get_internal_state(result: Any, controller: Any, *args: Any, **kwargs: Any) -> None:
    """Publish the report as ``/server_info`` -> ``internal_states[i]["engagement"]``."""
    REPORT.note_called("get_internal_state")
    state = getattr(result, "internal_state", None)
    if not isinstance(state, dict):
        raise ProbeError(f"result.internal_state is {type(state).__name__}, expected dict")
    state["engagement"] = REPORT.snapshot(hooks_attached=attached_hooks())


# The hook table lives beside the hooks: after_get_internal_state reports on it, so plugin.py (which
# registers the table) imports this module and nothing here imports plugin.py.
LOAD_MODEL = "sglang.srt.model_executor.model_runner.ModelRunner.load_model"
INIT_LM_HEAD = "sglang.srt.speculative.eagle_worker_v2.EagleDraftWorker.init_lm_head"
DSPARK_WORKER_INIT = "sglang.srt.speculative.dspark_components.dspark_worker_v2.DSparkWorkerV2.__init__"
GET_INTERNAL_STATE = (
    "sglang.srt.managers.scheduler_components.internal_state."
    "SchedulerInternalStateController.get_internal_state"
)

# Dotted SGLang target -> AFTER hook. Names are checked against the pinned
# sglang by tests/unit/probe, so a rename upstream fails CI, not the gate.
HOOK_TARGETS: dict[str, Callable[..., None]] = {
    LOAD_MODEL: after_load_model,
    INIT_LM_HEAD: after_init_lm_head,
    DSPARK_WORKER_INIT: after_dspark_worker_init,
    GET_INTERNAL_STATE: after_get_internal_state,
}


# What the probe reads off SGLang (a dotted name, or an attribute's name) -> the report fields it fills: a name SGLang
# renames leaves those fields unproven. sparkgate's `invoke sglang.diff` names the checks that read each field.
EVERY_FIELD = ("probe_version", "target", "draft", "lm_head_sharing", "hooks_registered", "hooks_attached",
               "hooks_called", "errors")
_HOOKED = ("hooks_called", "hooks_attached", "errors")
_SHARING = ("target", "draft", "lm_head_sharing", "errors")
HOOK_READS: dict[str, tuple[str, ...]] = {
    LOAD_MODEL: ("target", "draft", *_HOOKED),
    INIT_LM_HEAD: ("target", "draft", "lm_head_sharing", *_HOOKED),
    DSPARK_WORKER_INIT: ("target", "draft", "lm_head_sharing", *_HOOKED),
    GET_INTERNAL_STATE: EVERY_FIELD,  # no report is published without it
    "sglang.srt.plugins.hook_registry.HookRegistry": EVERY_FIELD,  # plugin.register, attached_hooks
    "sglang.srt.plugins.hook_registry.HookType": EVERY_FIELD,
    "sglang.srt.layers.moe.fused_moe_triton.layer.FusedMoE": ("target", "draft", "errors"),
    "sglang.srt.lora.layers.unwrap_lora_layer": _SHARING,
    "is_draft_worker": ("target", "draft", "errors"),
    "target_worker": _SHARING,
    "draft_runner": _SHARING,
    "draft_model": _SHARING,
    "runner_backend": ("target", "draft"),  # facts.moe_method_name
    "weight_scale": ("target", "draft"),  # facts.SCALE_ATTRS
    "weight_scale_inv": ("target", "draft"),
}


def attached_hooks() -> dict[str, bool]:
    """Per target: did SGLang apply the hooks, and is the live attribute a wrapper?"""
    from sglang.srt.plugins.hook_registry import HookRegistry

    patched = getattr(HookRegistry, "_patched", set())
    attached = {}
    for target in HOOK_TARGETS:
        try:
            wrapped = hasattr(pkgutil.resolve_name(target), "__wrapped__")
        except Exception:
            logger.debug("%s cannot resolve %s", LOG_PREFIX, target, exc_info=True)
            wrapped = False
        attached[target] = target in patched and wrapped
    return attached
