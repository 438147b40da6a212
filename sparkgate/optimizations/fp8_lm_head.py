"""FP8 LM head: quantized online at load by the inclusionAI fork (`SGLANG_ENABLE_FP8_LM_HEAD=1`).

Stock SGLang does not declare the variable and ignores it without a word, and the head is mutually
exclusive with `--enable-fp32-lm-head`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import StrictBool

from sparkgate.evidence.gather import Evidence, shown
from sparkgate.evidence.results import CheckResult, checked, failed
from sparkgate.evidence.stages import Stage
from sparkgate.frozen import Frozen
from sparkgate.sglang import conformance, fork
from sparkgate.sglang import flags as F

if TYPE_CHECKING:
    from sparkgate.profile.context import RuleContext
    from sparkgate.profile.model import Profile
    from sparkgate.profile.problems import Problem

KEY = "fp8_lm_head"
DOCS = "fp8_lm_head.md"
ENV = F.FP8_LM_HEAD_ENV
OWNED_ENV = (ENV,)
# The head is switched on by its env variable only (OWNED_ENV); no launch flag belongs to it.
OWNED_FLAGS: dict[str, tuple[str, ...] | None] = {}
# The SGLang facts rules() reads (options, "section.key" fixture entries), for `invoke sglang.diff`.
RULE_READS = (F.ENABLE_FP32_LM_HEAD, "fork_only.fp8_lm_head_env")
GATE_WOULD_MISS = "that the LM head is FP8"
CHECKS = {
    "fp8_lm_head.config_echo": Stage.CONFIGURATION,
    "fp8_lm_head.env_declared": Stage.ENVIRONMENT,
    "fp8_lm_head.target_head": Stage.PROBE_REPORT,
    "fp8_lm_head.log_signature": Stage.ENGINE_LOG,
}
# The SGLang facts each check reads: "section.key" (conformance fixture) or "probe.<field>" (the probe report).
# evidence/catalog.py validates them; tests/unit/test_declared_reads.py proves them on the recorded captures.
READS = {
    'fp8_lm_head.config_echo': ('server_args.enable_fp32_lm_head',),
    'fp8_lm_head.env_declared': (
        'fork_only.fp8_lm_head_env', 'strings.internal_state_env_vars', 'strings.server_info_internal_states',
    ),
    'fp8_lm_head.target_head': ('dtypes.fp8_e4m3fn', 'strings.server_info_internal_states', 'probe.target'),
    'fp8_lm_head.log_signature': ('fork_only.fp8_lm_head_log',),
}
# /server_info fields recorded with every verdict (`engine` in the verdict JSON; bench reads them).
CONFIG_KEYS = (conformance.server_arg("enable_fp32_lm_head"),)
LOG_SIGNATURE = fork.FP8_LM_HEAD_LOG  # fork-only: stock 0.5.23 never logs it
FP8_WEIGHT_DTYPES = (conformance.dtype("fp8_e4m3fn"),)


class Settings(Frozen):
    enabled: StrictBool = False


def env(profile: Profile) -> dict[str, str]:
    return {ENV: "1"} if profile.optimizations.fp8_lm_head.enabled else {}


def requested_by(ctx: RuleContext) -> list[str]:
    """Fields that turn the FP8 head on, however spelled (incl. SGLang's legacy SGL_ prefix)."""
    return [e.field for e in ctx.plan.env_for(ENV) if F.env_is_true(e.value)]


def rules(ctx: RuleContext) -> list[Problem]:
    problems = []
    fp8_fields = requested_by(ctx)
    fp32 = ctx.plan.options_for(F.ENABLE_FP32_LM_HEAD)  # any spelling SGLang would accept
    for fp8_field in fp8_fields:
        for occurrence in fp32:
            written = occurrence.parsed.written
            problems.append(
                ctx.problem(
                    [fp8_field, occurrence.field],
                    f"the FP8 LM head ({ENV}) and {F.ENABLE_FP32_LM_HEAD} (written {written!r}) are mutually "
                    "exclusive: one quantizes the head to FP8, the other forces FP32 logits",
                    f"drop {F.ENABLE_FP32_LM_HEAD} to keep the FP8 head, or disable optimizations.fp8_lm_head",
                )
            )
    enabled = ctx.profile.optimizations.fp8_lm_head.enabled
    # A profile's own env: entry for the variable is refused by the env rules (owned, whatever the value).
    if enabled and ENV not in ctx.image.capabilities.declared_env:
        problems.append(
            ctx.problem(
                ["optimizations.fp8_lm_head.enabled", "image"],
                f"image {ctx.profile.image!r} does not declare {ENV}; stock SGLang ignores unknown SGLANG_* "
                "variables silently, so the head would stay BF16",
                "use the fork image (spark-fork) or disable optimizations.fp8_lm_head",
            )
        )
    return problems


def expectations(profile: Profile) -> dict:
    return {
        "requested": profile.optimizations.fp8_lm_head.enabled,
        "env": ENV,
        "weight_dtypes": list(FP8_WEIGHT_DTYPES),
        "log_signature": LOG_SIGNATURE,
        "log_signature_count": 1,
    }


# --- evidence ------------------------------------------------------------------------------------


# No probe-report part of its own (engine.probe_report requires the target's lm_head record of every profile) and
# no re-checks of its own: every check but the log signature is re-checked with the common stages.

def checks(ev: Evidence) -> list[CheckResult]:
    results = []
    fp32 = ev.server_arg(conformance.server_arg("enable_fp32_lm_head"))
    results.append(checked(
        "fp8_lm_head.config_echo", fp32 is False, shown(fp32), False, "GET /server_info enable_fp32_lm_head",
        "the engine runs with --enable-fp32-lm-head, which excludes the FP8 head: redeploy the rendered bundle",
    ))
    state = ev.internal_state()
    env_vars = state.get(conformance.string_("internal_state_env_vars")) if state else None
    if not isinstance(env_vars, dict):
        results.append(failed(
            "fp8_lm_head.env_declared", "env_vars absent", f"{ENV}=1 listed", "/server_info internal_states[0].env_vars",
            "the engine was not started with SGLANG_EXPOSE_OWN_ENV_VARS=1 (set by every rendered bundle), "
            "so there is no proof the image knows the variable",
        ))
    else:
        value = env_vars.get(ENV)
        results.append(checked(
            "fp8_lm_head.env_declared", value is not None and F.env_is_true(str(value)), value, "1",
            "/server_info internal_states[0].env_vars",
            f"SGLang lists only variables it declares and that are set: {ENV} missing means either the image is "
            "stock SGLang (not the inclusionAI fork), which ignores the variable silently - deploy the spark-fork "
            "image - or the engine was started without the variable (hand-edited env file?)",
        ))
    head = (((ev.engagement() or {}).get("target") or {}).get("lm_head"))
    if not isinstance(head, dict):
        results.append(failed("fp8_lm_head.target_head", head, "FP8 weight with scales",
                              "/server_info internal_states[0].engagement", "no LM-head facts from the probe"))
    else:
        observed = {k: head.get(k) for k in ("weight_dtype", "has_weight_scale", "quant_method")}
        ok = head.get("weight_dtype") in FP8_WEIGHT_DTYPES and head.get("has_weight_scale") is True
        results.append(checked(
            "fp8_lm_head.target_head", ok, observed, {"weight_dtype": FP8_WEIGHT_DTYPES[0], "has_weight_scale": True},
            "/server_info internal_states[0].engagement target.lm_head",
            "the target LM head is not FP8: the image's SGLang ignored the variable or the patch did not apply",
        ))
    if ev.log is None or ev.log.text is None:
        results.append(failed("fp8_lm_head.log_signature", ev.log.error if ev.log else "no log",
                              f"exactly 1x '{LOG_SIGNATURE}'", "engine log", "give the engine log"))
    else:
        seen = ev.log.count(LOG_SIGNATURE)
        results.append(checked(
            "fp8_lm_head.log_signature", seen == 1, f"{seen}x", f"exactly 1x '{LOG_SIGNATURE}'", ev.log.source,
            "0 means the head was never quantized (stock image or env not passed); more than 1 means the log "
            "holds several starts or the draft quantized its own head; check the current log only",
        ))
    return results
