"""Ling-3.0-flash at full size on one NVIDIA H200, measured (docs/sizing.md): stock SGLang 0.5.23 with dummy weights
(the full shape's bytes, random routing), the Humming MoE runner, decode CUDA graphs, batch 1; decode tok/s by the
engine's own clock (meta_info), the GPU's device-copy bandwidth in the same run.

What carries to a Spark is a model, labelled as a prediction: a step's time is its bytes at the GPU's bandwidth
plus a fixed remainder (kernel launches, compute, the H200 lane's torch stand-ins). The H200's remainder with a
Spark's 273 GB/s gives one prediction; the published Spark figures stand beside it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from sparkgate.bench import roofline as roof

GPU = "NVIDIA H200 (stock SGLang 0.5.23, humming-kernels 0.1.12, dummy weights)"
BANDWIDTH_GB_S = 4296.0  # device-to-device copy of 4 GiB, read + write


@dataclass(frozen=True)
class Decode:
    """One measured decode: the lane's launch, the profile whose bytes it reads, its context and speed."""

    launch: str
    profile: str
    prompt: str
    context_tokens: int  # the prompt plus half of the 64 generated tokens: the mean context of a decode step
    decode_tok_s: float
    accept_length: float | None = None  # NEXTN whose dummy draft never agrees: one token a cycle

    def roofline(self, shape: roof.ModelShape, profile, bandwidth_gb_s: float = BANDWIDTH_GB_S) -> roof.Roofline:
        setup = roof.setup_for_profile(profile, accept_length=self.accept_length, context_tokens=self.context_tokens,
                                       bandwidth_gb_s=bandwidth_gb_s)
        return roof.compute(shape, setup)

    def remainder_s(self, line: roof.Roofline) -> float:
        """Measured seconds per cycle minus the bytes' time at the measured bandwidth."""
        cycle_s = line.tokens_per_cycle / self.decode_tok_s
        return cycle_s - line.bytes_per_cycle_bound / (BANDWIDTH_GB_S * roof.GB)


# Decode graphs, Humming; NEXTN on the same engine. Run F of the GPU lane (records: docs/sizing.md).
DECODES = (
    Decode("full-humming-cold", "humming", "short", 16 + 32, 69.7),
    Decode("full-humming-cold", "humming", "8k", 8000 + 32, 83.0),
    Decode("full-humming-cold", "humming", "32k", 32000 + 32, 79.8),
    Decode("full-humming-nextn", "mtp", "short", 16 + 32, 60.2, accept_length=1.016),
    Decode("full-humming-nextn", "mtp", "8k", 8000 + 32, 37.3, accept_length=1.016),
    Decode("full-humming-nextn", "mtp", "32k", 32000 + 32, 16.5, accept_length=1.016),
)


def for_profile(profile) -> list[Decode]:
    """The measured decodes whose bytes this profile's decode reads: plain for a profile without MTP, NEXTN with."""
    kind = "mtp" if profile.optimizations.mtp.enabled else "humming"
    return [d for d in DECODES if d.profile == kind]


def lines(profile, shape: roof.ModelShape, spark: roof.DecodeSetup) -> list[str]:
    """`invoke roofline`'s measured lines: each decode as a fraction of its bound at the measured bandwidth, and the
    prediction at `spark`'s bandwidth and accept length, at the decode's context, with the same remainder a cycle."""
    out = []
    for decode in for_profile(profile):
        line = decode.roofline(shape, profile)
        remainder = decode.remainder_s(line)
        there = roof.compute(shape, dataclasses.replace(spark, context_tokens=decode.context_tokens))
        predicted = there.tokens_per_cycle / (there.bytes_per_cycle_bound / (spark.bandwidth_gb_s * roof.GB)
                                              + remainder)
        accept = f", accept length {spark.accept_length:g}" if spark.mtp else ""
        out.append(f"  H200 measured ({decode.prompt} prompt, context {decode.context_tokens}): {decode.decode_tok_s:.1f} "
                   f"tok/s = {decode.decode_tok_s / line.bound_tok_s:.1%} of its bound at {BANDWIDTH_GB_S:g} GB/s, "
                   f"{remainder * 1e3:.2f} ms a cycle beyond the bytes; predicted at {spark.bandwidth_gb_s:g} GB/s"
                   f"{accept} with that remainder: {predicted:.1f} tok/s")
    return out
