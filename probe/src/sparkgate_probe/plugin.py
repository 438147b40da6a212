"""Entry point: SGLang's ``load_plugins()`` calls ``register()`` once per process.

``register()`` only queues hooks; SGLang resolves and applies them right after
(``HookRegistry.apply_hooks()``), and only *logs* a target it cannot patch.
That is why the report carries ``hooks_attached``: a partially attached
probe must be visible to the gate, not just in the server log.
"""

from __future__ import annotations

import pkgutil
from typing import Callable, Dict

from sparkgate_probe import hooks
from sparkgate_probe.report import LOG_PREFIX, REPORT, log_error, log_fact, logger

LOAD_MODEL = "sglang.srt.model_executor.model_runner.ModelRunner.load_model"
INIT_LM_HEAD = "sglang.srt.speculative.eagle_worker_v2.EagleDraftWorker.init_lm_head"
GET_INTERNAL_STATE = (
    "sglang.srt.managers.scheduler_components.internal_state."
    "SchedulerInternalStateController.get_internal_state"
)

# Dotted SGLang target -> AFTER hook. Names are checked against the pinned
# sglang by tests/unit/probe, so a rename upstream fails CI, not the gate.
HOOK_TARGETS: Dict[str, Callable[..., None]] = {
    LOAD_MODEL: hooks.after_load_model,
    INIT_LM_HEAD: hooks.after_init_lm_head,
    GET_INTERNAL_STATE: hooks.after_get_internal_state,
}


def register() -> None:
    """Queue one AFTER hook per target with SGLang's HookRegistry."""
    try:
        from sglang.srt.plugins.hook_registry import HookRegistry, HookType
    except Exception as exc:  # no registry: nothing can be reported, gate fails closed
        REPORT.record_error("register", exc)
        log_error("register", exc)
        return
    for target, hook in HOOK_TARGETS.items():
        try:
            HookRegistry.register(target, hook, HookType.AFTER)
            REPORT.note_registered(target)
        except Exception as exc:
            REPORT.record_error(f"register {target}", exc)
            log_error(f"register {target}", exc)
    log_fact("register", hooks_registered=sorted(HOOK_TARGETS))


def attached_hooks() -> Dict[str, bool]:
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
