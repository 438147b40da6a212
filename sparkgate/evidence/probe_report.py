"""Completeness of one role's record in the probe's engagement report (target, or an optimization's own
role such as MTP's draft). Imports nothing from the evidence package, so optimization modules can use it
at top level."""

from __future__ import annotations

ROLE_KEYS = ("model_class", "lm_head", "moe_layers")
LM_HEAD_KEYS = ("module_class", "quant_method", "weight_dtype", "has_weight_scale")
# The report's top-level fields (the probe's EngagementReport.snapshot): a check reads one as "probe.<field>" (READS).
REPORT_FIELDS = ("probe_version", "target", "draft", "lm_head_sharing", "hooks_registered", "hooks_attached",
                 "hooks_called", "errors", "errors_dropped")


def role_problems(report: dict, role: str) -> list[str]:
    """What is missing from `report[role]` (empty when the record is complete)."""
    record = report.get(role)
    if not isinstance(record, dict):
        return [f"{role} missing"]
    problems = [f"{role}.{k} missing" for k in ROLE_KEYS if k not in record]
    head = record.get("lm_head")
    if isinstance(head, dict):
        problems += [f"{role}.lm_head.{k} missing" for k in LM_HEAD_KEYS if k not in head]
    elif "lm_head" in record:
        problems.append(f"{role}.lm_head is {head!r}")
    return problems


def draft_sharing_problems(report: dict, sharing_hook: str) -> list[str]:
    """A speculative draft's parts of the report: the hook that records the LM-head share ran (`init_lm_head` for
    NEXTN, `dspark_worker_init` for DSpark), the draft's record is complete, and the sharing facts are there."""
    problems = []
    called = report.get("hooks_called")
    if isinstance(called, list) and sharing_hook not in called:
        problems.append(f"{sharing_hook} hook never ran (no LM-head sharing facts)")
    problems += role_problems(report, "draft")
    if not isinstance(report.get("lm_head_sharing"), dict):
        problems.append("lm_head_sharing missing")
    return problems
