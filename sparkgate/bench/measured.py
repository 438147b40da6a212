"""Ling-3.0-flash at full size on one NVIDIA H200, measured: stock SGLang 0.5.23 with dummy weights (the full
shape's bytes, random routing), the Humming MoE runner, decode CUDA graphs, batch 1; decode tok/s by the engine's own
clock (meta_info), the GPU's device-copy bandwidth in the same run (`bash tests/gpu/run full-size F`, 2026-12-06;
docs/sizing.md).

What carries to a Spark is a model, labelled as a prediction: a cycle's time is its bytes at the GPU's bandwidth
plus a remainder (kernel launches, compute, and on that H200 the GPU lane's torch stand-ins for sgl_kernel). The
remainder is not fixed: it grows with context, most with NEXTN. Dummy weights route at random, so the H200's bytes
are the roofline's estimate (independent routing); a real model's lie between bound and estimate, so the prediction
is a range. The published Spark figures stand beside it; only Humming profiles without DSpark were measured.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

from sparkgate.bench import roofline as roof

GPU = "NVIDIA H200 (stock SGLang 0.5.23, humming-kernels 0.1.12, dummy weights, BF16 head)"
BANDWIDTH_GB_S = 4267.3  # device-to-device copy of 4 GiB, read + write


@dataclass(frozen=True)
class Decode:
    """One measured decode: the lane's launch, the profile it ran (its bytes), its context and speed."""

    launch: str
    profile: str
    prompt: str
    context_tokens: int  # the prompt plus half of the 64 generated tokens: the mean context of a decode step
    decode_tok_s: float
    accept_length: float | None = None  # NEXTN whose dummy draft never agrees: about one token a cycle

    def roofline(self, shape: roof.ModelShape) -> roof.Roofline:
        """The roofline of what ran on the H200: its own profile's bytes at the measured bandwidth."""
        setup = roof.setup_for_profile(_shipped(self.profile), accept_length=self.accept_length,
                                       context_tokens=self.context_tokens, bandwidth_gb_s=BANDWIDTH_GB_S)
        return roof.compute(shape, setup)

    def remainder_s(self, line: roof.Roofline) -> float:
        """Measured seconds per cycle minus the bytes' time (random routing: the estimate's bytes)."""
        return line.tokens_per_cycle / self.decode_tok_s - line.bytes_per_cycle_estimate / (
            line.setup.bandwidth_gb_s * roof.GB)


@functools.cache
def _shipped(name: str):
    """A shipped profile, loaded once (the measured decodes share two)."""
    from sparkgate.profile import loading

    return loading.load(name).profile


# Decode graphs, Humming; NEXTN on the same engine.
DECODES = (
    Decode("full-humming-cold", "humming", "short", 16 + 32, 73.1),
    Decode("full-humming-cold", "humming", "8k", 8000 + 32, 82.1),
    Decode("full-humming-cold", "humming", "32k", 32000 + 32, 78.9),
    Decode("full-humming-nextn", "mtp", "short", 16 + 32, 60.4, accept_length=1.016),
    Decode("full-humming-nextn", "mtp", "8k", 8000 + 32, 36.8, accept_length=1.016),
    Decode("full-humming-nextn", "mtp", "32k", 32000 + 32, 16.3, accept_length=1.016),
)


def for_profile(profile) -> list[Decode]:
    """The measured decodes that ran this profile's kernels and speculation: Humming without DSpark, plain or NEXTN.
    None for the FlashInfer runner (baseline, fp8-lm-head) or DSpark: not measured."""
    opts = profile.optimizations
    if not opts.humming.enabled or opts.dspark.enabled:
        return []
    kind = "mtp" if opts.mtp.enabled else "humming"
    return [d for d in DECODES if d.profile == kind]


def predicted_tok_s(there: roof.Roofline, remainder_s: float) -> tuple[float, float]:
    """(routing shared across the verify window, independent routing): tok/s with `remainder_s` a cycle."""
    seconds = there.setup.bandwidth_gb_s * roof.GB
    return tuple(there.tokens_per_cycle / (nbytes / seconds + remainder_s)
                 for nbytes in (there.bytes_per_cycle_bound, there.bytes_per_cycle_estimate))


def lines(profile, shape: roof.ModelShape, spark: roof.DecodeSetup) -> list[str]:
    """`invoke roofline`'s measured lines: each decode as a fraction of its bound at the measured bandwidth, and the
    prediction at `spark`'s bandwidth, head and accept length, at the decode's context, with the same remainder."""
    measured = for_profile(profile)
    if not measured:
        return [f"  not measured on the H200 (Humming profiles without DSpark only): {profile.name}"]
    out = [f"  measured on {GPU}; the predictions assume its time beyond the bytes carries over (it holds the "
           f"GPU lane's torch stand-ins: treat them as a rough range)"]
    for decode in measured:
        line = decode.roofline(shape)
        remainder = decode.remainder_s(line)
        there = roof.compute(shape, dataclasses.replace(spark, context_tokens=decode.context_tokens))
        shared, independent = predicted_tok_s(there, remainder)
        accept = f", accept length {spark.accept_length:g}" if spark.mtp else ""
        spread = f"{independent:.1f}" if round(independent, 1) == round(shared, 1) else f"{independent:.1f}-{shared:.1f}"
        out.append(f"  H200 ({decode.prompt} prompt, context {decode.context_tokens}): {decode.decode_tok_s:.1f} tok/s "
                   f"= {decode.decode_tok_s / line.estimate_tok_s:.1%} of its bytes' speed at {BANDWIDTH_GB_S:g} GB/s, "
                   f"{remainder * 1e3:.2f} ms a cycle beyond them; predicted at {spark.bandwidth_gb_s:g} GB/s{accept}: "
                   f"{spread} tok/s")
    return out
