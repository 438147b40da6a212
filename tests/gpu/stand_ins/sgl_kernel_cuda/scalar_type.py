"""`sgl_kernel.scalar_type` for the GPU lane's stand-in (test-only): the weight-type descriptors Marlin passes by id.

No GPU op: SGLang 0.5.23's Marlin path reads `scalar_types.<name>` in Python
(sglang/srt/layers/quantization/marlin_utils.py, marlin_utils_fp4.py:25,121,
sglang/srt/layers/moe/fused_moe_triton/fused_marlin_moe.py `get_scalar_type`) and hands `b_q_type.id` to its JIT
kernels (sglang/kernels/ops/moe/moe_wna16_marlin.py:196, kernels/ops/gemm/gptq_marlin.py:110), which decode it with
`ScalarType::from_id` of sglang/kernels/jit/include/sgl_kernel/scalar_type.hpp. Without this file the stand-in's
lenient submodule (`_loud.py`) would hand out MissingOp objects and Marlin would fail at its first MoE forward.

The id packs the fields in constructor order, least significant first, each in its C++ width: exponent (8 bits),
mantissa (8), signed (1), bias (32), finite_values_only (1), nan_repr (8).
"""

from __future__ import annotations

import dataclasses
import enum
from types import SimpleNamespace

__all__ = ["NanRepr", "ScalarType", "scalar_types"]


class NanRepr(enum.IntEnum):
    NONE = 0  # no NaNs
    IEEE_754 = 1  # exponent all ones, mantissa not all zeros
    EXTD_RANGE_MAX_MIN = 2  # exponent and mantissa all ones


_FIELD_BITS = (("exponent", 8), ("mantissa", 8), ("signed", 1), ("bias", 32), ("_finite_values_only", 1),
               ("nan_repr", 8))


@dataclasses.dataclass(frozen=True)
class ScalarType:
    exponent: int
    mantissa: int
    signed: bool
    bias: int
    _finite_values_only: bool = False
    nan_repr: NanRepr = NanRepr.IEEE_754

    @property
    def id(self) -> int:
        value, offset = 0, 0
        for name, bits in _FIELD_BITS:
            value |= (int(getattr(self, name)) & ((1 << bits) - 1)) << offset
            offset += bits
        return value

    @property
    def size_bits(self) -> int:
        return self.exponent + self.mantissa + int(self.signed)

    def is_floating_point(self) -> bool:
        return self.exponent != 0

    def is_integer(self) -> bool:
        return self.exponent == 0

    def has_bias(self) -> bool:
        return self.bias != 0

    @classmethod
    def int_(cls, size_bits: int, bias: int = 0) -> ScalarType:
        return cls(0, size_bits - 1, True, bias)

    @classmethod
    def uint(cls, size_bits: int, bias: int = 0) -> ScalarType:
        return cls(0, size_bits, False, bias)

    @classmethod
    def float_IEEE754(cls, exponent: int, mantissa: int) -> ScalarType:  # noqa: N802 (sgl-kernel's name)
        return cls(exponent, mantissa, True, 0)

    @classmethod
    def float_(cls, exponent: int, mantissa: int, finite_values_only: bool, nan_repr: NanRepr) -> ScalarType:
        return cls(exponent, mantissa, True, 0, finite_values_only, NanRepr(nan_repr))


scalar_types = SimpleNamespace(
    int4=ScalarType.int_(4),
    uint4=ScalarType.uint(4),
    int8=ScalarType.int_(8),
    uint8=ScalarType.uint(8),
    uint4b8=ScalarType.uint(4, 8),
    uint8b128=ScalarType.uint(8, 128),
    float4_e2m1f=ScalarType.float_(2, 1, True, NanRepr.NONE),
    float6_e3m2f=ScalarType.float_(3, 2, True, NanRepr.NONE),
    float8_e4m3fn=ScalarType.float_(4, 3, True, NanRepr.EXTD_RANGE_MAX_MIN),
    float8_e5m2=ScalarType.float_IEEE754(5, 2),
    float8_e8m0fnu=ScalarType(8, 0, False, 0, True, NanRepr.EXTD_RANGE_MAX_MIN),
    float16_e8m7=ScalarType.float_IEEE754(8, 7),
    float16_e5m10=ScalarType.float_IEEE754(5, 10),
)
scalar_types.bfloat16 = scalar_types.float16_e8m7
scalar_types.float16 = scalar_types.float16_e5m10
