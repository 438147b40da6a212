"""Humming MoE kernels (`--moe-runner-backend humming`, package humming-kernels, JIT per shape)."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Literal

from pydantic import StrictBool

from sparkgate.evidence.gather import Evidence, shown
from sparkgate.evidence.results import CheckResult, checked, failed
from sparkgate.evidence.stages import Stage
from sparkgate.frozen import Frozen
from sparkgate.profile.safe_types import ContainerPath
from sparkgate.sglang import conformance
from sparkgate.sglang import flags as F

if TYPE_CHECKING:
    from sparkgate.profile.context import RuleContext
    from sparkgate.profile.model import Profile
    from sparkgate.profile.problems import Problem

KEY = "humming"
DOCS = "humming.md"
BACKEND = conformance.string_("moe_backend_humming")
# Only optimizations.humming may pick the Humming runner: elsewhere the gate would never check it engaged.
OWNED_FLAGS: dict[str, tuple[str, ...] | None] = {F.MOE_RUNNER_BACKEND: (BACKEND,)}
# The SGLang facts rules() reads, for `invoke sglang.diff`: none beyond its OWNED_FLAGS, which rules.py's declare.
RULE_READS: tuple[str, ...] = ()
GATE_WOULD_MISS = "that Humming engaged"
CHECKS = {
    "humming.config_echo": Stage.CONFIGURATION,
    "humming.moe_layers_target": Stage.PROBE_REPORT,
    "humming.moe_layers_draft": Stage.PROBE_REPORT,
    "humming.log_signature": Stage.ENGINE_LOG,
}
# The SGLang facts each check reads: "section.key" (conformance fixture) or "probe.<field>" (the probe report).
# evidence/catalog.py validates them; tests/unit/test_declared_reads.py proves them on the recorded captures.
READS = {
    'humming.config_echo': ('server_args.moe_runner_backend', 'strings.moe_backend_humming'),
    'humming.moe_layers_target': (
        'classes.humming_moe_method', 'classes.mxfp4_humming_moe_method', 'strings.moe_backend_humming',
        'strings.server_info_internal_states', 'probe.target',
    ),
    'humming.moe_layers_draft': (
        'classes.humming_moe_method', 'classes.mxfp4_humming_moe_method', 'strings.moe_backend_humming',
        'strings.server_info_internal_states', 'probe.draft',
    ),
    'humming.log_signature': ('log_formats.humming_gemm', 'strings.gemm_indexed'),
}
# /server_info fields recorded with every verdict (`engine` in the verdict JSON; bench reads them).
CONFIG_KEYS = (conformance.server_arg("moe_runner_backend"),)
# A start that dies after loading never answers /server_info, but its log holds the probe's census at load: what ran
# instead of Humming is named there too (evidence/startup.py).
LOAD_CENSUS_CHECKS = ("humming.moe_layers_target", "humming.moe_layers_draft")
# FusedMoE quant methods that actually run Humming kernels (anything else is a fallback).
ENGAGED_MOE_METHODS = (conformance.class_name("humming_moe_method"), conformance.class_name("mxfp4_humming_moe_method"))
# SGLang logs the GEMM flavour it picked at the first Humming MoE forward: indexed by default,
# grouped_contiguous with SGLANG_HUMMING_MOE_GEMM_TYPE=grouped. The check accepts either.
LOG_SIGNATURE = conformance.log_line("humming_gemm", gemm_type=conformance.string_("gemm_indexed"))
LOG_PATTERN = conformance.log_pattern("humming_gemm")
OWNED_ENV = (F.HUMMING_COMPILER_ENV, F.HUMMING_CACHE_DIR_ENV)


class Settings(Frozen):
    enabled: StrictBool = False
    compiler: Literal["nvrtc", "nvcc"] = "nvrtc"
    # Persisted (its parent directory is mounted from the host cache): kernels compile per shape.
    cache_dir: ContainerPath = "/root/.humming/cache"


def flags(profile: Profile) -> dict[str, object]:
    return {F.MOE_RUNNER_BACKEND: BACKEND} if profile.optimizations.humming.enabled else {}


def env(profile: Profile) -> dict[str, str]:
    settings = profile.optimizations.humming
    if not settings.enabled:
        return {}
    return {F.HUMMING_COMPILER_ENV: settings.compiler, F.HUMMING_CACHE_DIR_ENV: settings.cache_dir}


# Container directories the host kernel-cache mount (the cache_dir's parent) may not cover.
RESERVED_MOUNTS = ("/proc", "/sys", "/dev", "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib64", "/boot", "/run",
                   "/var/log/sparkgate", "/bundle", "/models", "/opt")


def rules(ctx: RuleContext) -> list[Problem]:
    problems = []
    root = PurePosixPath(ctx.profile.optimizations.humming.cache_dir).parent
    if len(root.parts) < 3 or any(root == PurePosixPath(r) or PurePosixPath(r) in root.parents for r in RESERVED_MOUNTS):
        problems.append(ctx.problem(
            ["optimizations.humming.cache_dir"],
            f"its parent {root} is mounted from the host kernel cache, and {root} is not a place a mount may go",
            "use a directory at least two levels below / outside system paths, e.g. /root/.humming/cache",
        ))
    enabled = ctx.profile.optimizations.humming.enabled
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


# --- evidence ------------------------------------------------------------------------------------


# No probe-report part of its own (humming.moe_layers_* judge the MoE layers) and no re-checks of its own: every
# check but the log signature is re-checked with the common stages.

def checks(ev: Evidence) -> list[CheckResult]:
    results = []
    backend = ev.server_arg(conformance.server_arg("moe_runner_backend"))
    results.append(checked(
        "humming.config_echo", backend == BACKEND, shown(backend), BACKEND, "GET /server_info moe_runner_backend",
        "the engine was not launched with --moe-runner-backend humming: redeploy this profile's bundle",
    ))
    report = ev.engagement()
    source = "/server_info internal_states[0].engagement moe_layers"
    for role in ("target", "draft") if ev.requested("mtp") else ("target",):
        layers = ((report or {}).get(role) or {}).get("moe_layers")
        name = f"humming.moe_layers_{role}"
        if not isinstance(layers, dict) or not layers:
            results.append(failed(name, layers, f"every MoE layer on {'/'.join(ENGAGED_MOE_METHODS)} + humming",
                                  source, "no MoE-layer facts from the probe (see engine.probe_report)"))
            continue
        off = {key: count for key, count in layers.items()
               if key.rsplit("/", 1)[-1] != BACKEND or key.split("/", 1)[0] not in ENGAGED_MOE_METHODS}
        results.append(checked(
            name, not off, layers, f"only {' or '.join(m + '/' + BACKEND for m in ENGAGED_MOE_METHODS)}", source,
            "Humming silently fell back on these layers; observed names what ran instead (method/runner). Another "
            "runner on the MXFP4 experts (Marlin, or FlashInfer: stock SGLang's own pick for Ling-3.0-flash-fp4 on "
            "SM90/SM100/SM120 when no runner is given) means --moe-runner-backend humming did not reach the engine: "
            "redeploy this profile's bundle. An unquantized (Triton) method means the checkpoint's quantization is "
            "not one Humming takes with --moe-runner-backend alone: use the MXFP4 checkpoint (Ling-3.0-flash-fp4) or "
            "add --quantization humming with SGLANG_HUMMING_ONLINE_QUANT_CONFIG",
        ))
    if ev.log is None or ev.log.text is None:
        results.append(failed("humming.log_signature", ev.log.error if ev.log else "no log", LOG_SIGNATURE,
                              "engine log", "give the engine log so the Humming kernel line can be checked"))
    else:
        seen = len(ev.log.matching(LOG_PATTERN))
        results.append(checked(
            "humming.log_signature", seen >= 1, f"{seen}x", f">= 1x '{conformance.log_format('humming_gemm')}'",
            ev.log.source,
            "no Humming MoE forward ran during warmup/capture: the runner fell back; check humming-kernels imports "
            "in the image (sparkgate build-guard) and the MoE layer methods",
        ))
    return results
