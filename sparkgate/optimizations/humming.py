"""Humming MoE kernels (`--moe-runner-backend humming`, package humming-kernels, JIT per shape)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from sparkgate import sglang_flags as F
from sparkgate.frozen import Frozen

if TYPE_CHECKING:
    from sparkgate.context import RuleContext
    from sparkgate.model import Profile
    from sparkgate.problems import Problem

KEY = "humming"
BACKEND = "humming"
# FusedMoE quant methods that actually run Humming kernels (anything else is a fallback).
ENGAGED_MOE_METHODS = ("HummingMoEMethod", "Mxfp4HummingMoEMethod")
LOG_SIGNATURE = "Using indexed gemm for humming moe"
OWNED_ENV = (F.HUMMING_COMPILER_ENV, F.HUMMING_CACHE_DIR_ENV)


class Settings(Frozen):
    enabled: bool = False
    compiler: Literal["nvrtc", "nvcc"] = "nvrtc"
    cache_dir: str = "/root/.humming/cache"  # persisted by a named volume: kernels compile per shape


def flags(profile: Profile) -> dict[str, object]:
    return {F.MOE_RUNNER_BACKEND: BACKEND} if profile.optimizations.humming.enabled else {}


def env(profile: Profile) -> dict[str, str]:
    settings = profile.optimizations.humming
    if not settings.enabled:
        return {}
    return {F.HUMMING_COMPILER_ENV: settings.compiler, F.HUMMING_CACHE_DIR_ENV: settings.cache_dir}


def rules(ctx: RuleContext) -> list[Problem]:
    problems = []
    enabled = ctx.profile.optimizations.humming.enabled
    backend = ctx.plan.options_for(F.MOE_RUNNER_BACKEND)
    if not enabled:
        for occurrence in backend:
            if occurrence.parsed.values == (BACKEND,):
                problems.append(
                    ctx.problem(
                        [occurrence.field],
                        "asks SGLang for the Humming MoE runner outside optimizations.humming, "
                        "so the gate would never check that Humming engaged",
                        "set optimizations.humming.enabled: true and remove this setting",
                    )
                )
    if enabled and not ctx.image.capabilities.humming_kernels:
        problems.append(
            ctx.problem(
                ["optimizations.humming.enabled", "image"],
                f"image {ctx.profile.image!r} does not ship humming-kernels",
                "pick an engine image whose capabilities list humming_kernels: true in images.lock.yaml",
            )
        )
    return problems


def expectations(profile: Profile) -> dict:
    return {
        "requested": profile.optimizations.humming.enabled,
        "moe_runner_backend": BACKEND,
        "engaged_moe_methods": list(ENGAGED_MOE_METHODS),
        "log_signature": LOG_SIGNATURE,
    }
