"""FP8 LM head: quantized online at load by the inclusionAI fork (`SGLANG_ENABLE_FP8_LM_HEAD=1`).

Stock SGLang does not declare the variable and ignores it without a word, and the head is mutually
exclusive with `--enable-fp32-lm-head`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparkgate import sglang_flags as F
from sparkgate.frozen import Frozen

if TYPE_CHECKING:
    from sparkgate.context import RuleContext
    from sparkgate.model import Profile
    from sparkgate.problems import Problem

KEY = "fp8_lm_head"
ENV = F.FP8_LM_HEAD_ENV
OWNED_ENV = (ENV,)
LOG_SIGNATURE = "Online FP8 quantization enabled for lm_head."
FP8_WEIGHT_DTYPES = ("torch.float8_e4m3fn",)


class Settings(Frozen):
    enabled: bool = False


def flags(profile: Profile) -> dict[str, object]:
    return {}


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
    if not enabled:
        for field in fp8_fields:
            problems.append(
                ctx.problem(
                    [field],
                    f"sets {ENV} outside optimizations.fp8_lm_head, so the gate would never check it engaged",
                    "set optimizations.fp8_lm_head.enabled: true and remove this variable",
                )
            )
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
