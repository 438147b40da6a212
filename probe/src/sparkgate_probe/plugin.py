"""Entry point: SGLang's ``load_plugins()`` calls ``register()`` once per process.

``register()`` only queues hooks; SGLang resolves and applies them right after
(``HookRegistry.apply_hooks()``), and only *logs* a target it cannot patch.
That is why the report carries ``hooks_attached``: a partially attached
probe must be visible to the gate, not just in the server log.
"""

from __future__ import annotations

from sparkgate_probe import hooks  # noqa: F401 - plugin.hooks is part of the module's surface
from sparkgate_probe.hooks import (  # noqa: F401 - re-exported: the table and its report
    DSPARK_WORKER_INIT,
    GET_INTERNAL_STATE,
    HOOK_TARGETS,
    INIT_LM_HEAD,
    LOAD_MODEL,
    attached_hooks,
)
from sparkgate_probe.report import REPORT, log_error, log_fact


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
