"""MTP speculative decoding with the checkpoint's NEXTN layer (3 draft steps, 4-position verify)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field, StrictBool

from sparkgate.evidence.calibration import accept_length_check
from sparkgate.evidence.gather import Evidence, shown
from sparkgate.evidence.probe_report import draft_sharing_problems
from sparkgate.evidence.results import CheckResult, checked, failed
from sparkgate.evidence.stages import Stage
from sparkgate.frozen import Frozen
from sparkgate.optimizations import fp8_lm_head, mtp_recheck
from sparkgate.profile.safe_types import ContainerPath
from sparkgate.sglang import conformance, fork
from sparkgate.sglang import flags as F

if TYPE_CHECKING:
    from sparkgate.profile.context import RuleContext
    from sparkgate.profile.model import Profile
    from sparkgate.profile.problems import Problem

KEY = "mtp"
DOCS = "mtp.md"
OWNED_ENV: tuple[str, ...] = ()
# Only optimizations.mtp may ask for speculative decoding (any value): elsewhere the gate would never check it.
OWNED_FLAGS: dict[str, tuple[str, ...] | None] = {flag: None for flag in F.SPECULATIVE_FLAGS}
# The SGLang facts rules() reads (options, "section.key" fixture entries), for `invoke sglang.diff`.
RULE_READS = (F.SPECULATIVE_TOKEN_MAP, "classes.nextn_draft", "fork_only.fp8_lm_head_env")
GATE_WOULD_MISS = "the draft's acceptance"
CHECKS = {
    "mtp.config_echo": Stage.CONFIGURATION,
    "mtp.draft_loaded": Stage.PROBE_REPORT,
    "mtp.lm_head_module_shared": Stage.PROBE_REPORT,
    "mtp.log_draft_loaded": Stage.ENGINE_LOG,
    "mtp.accept_length": Stage.CALIBRATION,
    **mtp_recheck.CHECKS,  # after admission: acceptance judged by the sentinel's own probe
}
# The SGLang facts each check reads: "section.key" (conformance fixture) or "probe.<field>" (the probe report).
# evidence/catalog.py validates them; tests/unit/test_declared_reads.py proves them on the recorded captures.
READS = {
    'mtp.config_echo': (
        'server_args.speculative_algorithm', 'server_args.speculative_eagle_topk',
        'server_args.speculative_num_draft_tokens', 'server_args.speculative_num_steps', 'strings.spec_algorithm_eagle',
    ),
    'mtp.draft_loaded': ('classes.nextn_draft', 'strings.server_info_internal_states', 'probe.draft'),
    'mtp.lm_head_module_shared': ('strings.server_info_internal_states', 'probe.lm_head_sharing'),
    'mtp.log_draft_loaded': ('classes.nextn_draft', 'log_formats.load_weight_end'),
    'mtp.accept_length': (
        'strings.meta_completion_tokens', 'strings.meta_e2e_latency', 'strings.meta_finish_reason',
        'strings.meta_first_token_latency', 'strings.meta_spec_verify_ct',
    ),
    **mtp_recheck.READS,
}
# The checks whose `observed[figure]` is that figure (the sentinel's history and status page read them from here).
FIGURES = {"accept_length": ("mtp.accept_length", "sentinel.accept_probe")}
# Sentinel gauges: name -> (help, path into the latest full verification's verdict).
GAUGES = {
    "sparkgate_accept_length": ("MTP accept length measured by the latest calibration.",
                                ("calibration", "accept_length")),
}
# /server_info fields recorded with every verdict (`engine` in the verdict JSON; bench reads them).
CONFIG_KEYS = tuple(conformance.server_arg(f"speculative_{name}")
                    for name in ("algorithm", "num_steps", "eagle_topk", "num_draft_tokens"))
start_rechecks = mtp_recheck.start
rechecks = mtp_recheck.rechecks
DRAFT_MODEL_CLASS = conformance.class_name("nextn_draft")
# SGLang resolves NEXTN to EAGLE and reports that in /server_info (arg_groups/speculative_hook.py).
RESOLVED_ALGORITHM = conformance.string_("spec_algorithm_eagle")


class Settings(Frozen):
    enabled: StrictBool = False
    algorithm: Literal["NEXTN"] = "NEXTN"
    num_steps: Annotated[int, Field(strict=True, ge=1, le=16)] = 3
    eagle_topk: Annotated[int, Field(strict=True, ge=1, le=16)] = 1
    num_draft_tokens: Annotated[int, Field(strict=True, ge=2, le=64)] = 4
    draft_model_path: ContainerPath | None = Field(
        None, description="Defaults to model.path, where the NEXTN layer ships; any other path is refused"
    )
    min_accept_length: Annotated[float, Field(strict=True, gt=1.0, le=64)] = Field(
        2.0, description="Gate floor for the measured accept length; a broken draft reads 1.00"
    )


def flags(profile: Profile) -> dict[str, object]:
    settings = profile.optimizations.mtp
    if not settings.enabled:
        return {}
    return {
        F.SPECULATIVE_ALGORITHM: settings.algorithm,
        F.SPECULATIVE_DRAFT_MODEL_PATH: settings.draft_model_path or profile.model.path,
        F.SPECULATIVE_NUM_STEPS: settings.num_steps,
        F.SPECULATIVE_EAGLE_TOPK: settings.eagle_topk,
        F.SPECULATIVE_NUM_DRAFT_TOKENS: settings.num_draft_tokens,
    }


# The least accept length a profile may ask the gate for (docs/gate.md "Floors"): a healthy NEXTN draft accepts
# about 2.7 on the calibration prompts, a broken one 1.00.
MIN_ACCEPT_LENGTH_FLOOR = 2.0


def rules(ctx: RuleContext) -> list[Problem]:
    problems = []
    settings = ctx.profile.optimizations.mtp
    draft = settings.draft_model_path
    if draft is not None and draft != ctx.profile.model.path:
        problems.append(ctx.problem(
            ["optimizations.mtp.draft_model_path", "model.path"],
            f"NEXTN's draft is the checkpoint's own layer in {ctx.profile.model.path}; {draft} would load another "
            "model that is neither mounted nor what the gate checks",
            "remove optimizations.mtp.draft_model_path",
        ))
    if not settings.enabled:
        return problems  # speculative flags set elsewhere: refused through OWNED_FLAGS (rules.py)
    if settings.min_accept_length < MIN_ACCEPT_LENGTH_FLOOR:
        problems.append(ctx.problem(
            ["optimizations.mtp.min_accept_length"],
            f"{settings.min_accept_length} is below the gate's minimum {MIN_ACCEPT_LENGTH_FLOOR}: a healthy NEXTN "
            "draft accepts about 2.7, a broken one 1.00",
            f"set optimizations.mtp.min_accept_length to {MIN_ACCEPT_LENGTH_FLOOR} or more (a profile may only "
            "tighten the gate)",
        ))
    if settings.eagle_topk == 1 and settings.num_draft_tokens != settings.num_steps + 1:
        problems.append(
            ctx.problem(
                ["optimizations.mtp.num_draft_tokens", "optimizations.mtp.num_steps"],
                f"with eagle_topk 1 the verify window is num_steps + 1 = {settings.num_steps + 1}, "
                f"got num_draft_tokens {settings.num_draft_tokens} (SGLang would silently rewrite it)",
                f"set num_draft_tokens: {settings.num_steps + 1}",
            )
        )
    fp8_fields = fp8_lm_head.requested_by(ctx)
    if fp8_fields and not ctx.image.capabilities.nextn_lm_head_module_sharing:
        problems.append(
            ctx.problem(
                ["optimizations.mtp.enabled", fp8_fields[0], "image"],
                f"MTP with the FP8 LM head needs an image whose {DRAFT_MODEL_CLASS} draft shares the target's "
                f"whole LM-head module; image {ctx.profile.image!r} shares only the weight tensor, so the draft "
                "reads FP8 weights without their scales: accept length collapses to 1.00 and decode falls to "
                "~24 tok/s, below the 37.8 tok/s baseline",
                "use an image with nextn_lm_head_module_sharing: true (spark-fork), or drop one of the two",
            )
        )
    if fp8_fields:
        for occurrence in ctx.plan.options_for(F.SPECULATIVE_TOKEN_MAP):
            problems.append(
                ctx.problem(
                    [occurrence.field, fp8_fields[0]],
                    f"{F.SPECULATIVE_TOKEN_MAP} makes SGLang skip the draft's LM-head module share, which the "
                    "FP8 head needs (accept length would collapse to 1.00)",
                    f"remove {F.SPECULATIVE_TOKEN_MAP}",
                )
            )
    return problems


def expectations(profile: Profile) -> dict:
    settings = profile.optimizations.mtp
    return {
        "requested": settings.enabled,
        "algorithm": settings.algorithm,
        "resolved_algorithm": RESOLVED_ALGORITHM,
        "num_steps": settings.num_steps,
        "eagle_topk": settings.eagle_topk,
        "num_draft_tokens": settings.num_draft_tokens,
        "draft_model_class": DRAFT_MODEL_CLASS,
        "min_accept_length": settings.min_accept_length,
        "module_sharing_required": settings.enabled and profile.optimizations.fp8_lm_head.enabled,
        "module_sharing_draft_classes": list(fork.FORK_MODULE_SHARING_DRAFT_CLASSES),
    }


# --- evidence ------------------------------------------------------------------------------------


def probe_report_problems(report: dict) -> list[str]:
    """MTP's parts of the probe report: the draft's record and the LM-head sharing facts."""
    return draft_sharing_problems(report, "init_lm_head")


def checks(ev: Evidence) -> list[CheckResult]:
    want = ev.expectations["optimizations"][KEY]
    results = []
    echo = {name: ev.server_arg(conformance.server_arg(f"speculative_{name}"))
            for name in ("algorithm", "num_steps", "eagle_topk", "num_draft_tokens")}
    expected = {
        "algorithm": want["resolved_algorithm"], "num_steps": want["num_steps"],
        "eagle_topk": want["eagle_topk"], "num_draft_tokens": want["num_draft_tokens"],
    }
    results.append(checked(
        "mtp.config_echo", echo == expected, {k: shown(v) for k, v in echo.items()},
        expected, "GET /server_info speculative_*",
        "the engine was not launched with the profile's NEXTN flags: redeploy the rendered bundle",
    ))
    report = ev.engagement() or {}
    draft = report.get("draft")
    draft_class = draft.get("model_class") if isinstance(draft, dict) else None
    results.append(checked(
        "mtp.draft_loaded", draft_class == want["draft_model_class"], draft_class, want["draft_model_class"],
        "/server_info internal_states[0].engagement draft.model_class",
        "no NEXTN draft model was loaded: speculative decoding is silently off (draft weights missing from the "
        "checkpoint, or the draft failed to load); check the log for the draft's 'Load weight end' line",
    ))
    if want["module_sharing_required"]:
        sharing = report.get("lm_head_sharing")
        module_shared = sharing.get("module_shared") if isinstance(sharing, dict) else None
        results.append(checked(
            "mtp.lm_head_module_shared", module_shared is True, sharing, {"module_shared": True},
            "/server_info internal_states[0].engagement lm_head_sharing",
            "the draft shares only the target's LM-head tensor, not the module: with the FP8 head it reads FP8 "
            "weights without their scales, acceptance collapses to 1.00 and decode drops below baseline; deploy an "
            "image whose BailingMoeForCausalLMNextN has set_lm_head_from_target (spark-fork)",
        ))
    if ev.log is None or ev.log.text is None:
        results.append(failed("mtp.log_draft_loaded", ev.log.error if ev.log else "no log",
                              f"'Load weight end ... type={want['draft_model_class']}, ...'", "engine log",
                              "give the engine log"))
    else:
        lines = ev.log.matching(conformance.log_pattern("load_weight_end", model_class=want["draft_model_class"]))
        results.append(checked(
            "mtp.log_draft_loaded", len(lines) >= 1, f"{len(lines)} draft load line(s)", ">= 1", ev.log.source,
            "the log shows no draft load: speculative decoding is not running",
        ))
    results.append(accept_length_check(
        "mtp.accept_length", ev.calibration, want["min_accept_length"],
        "missing means the engine reports no speculative fields (draft not running); ~1.00 means every draft "
        "token is rejected - with the FP8 head this is the unshared LM-head trap; otherwise check the draft "
        "weights",
    ))
    return results
