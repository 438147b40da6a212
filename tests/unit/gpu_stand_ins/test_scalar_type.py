"""The GPU lane's `sgl_kernel.scalar_type` stand-in (tests/gpu/stand_ins/sgl_kernel_cuda/scalar_type.py): the ids
Marlin's JIT kernels decode.

The expected ids were printed by a C++17 program that includes SGLang 0.5.23's own
sglang/kernels/jit/include/sgl_kernel/scalar_type.hpp and prints `kFloat4_e2m1f.id()` and the rest (g++ -std=c++17).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

OPS = Path(__file__).resolve().parents[2] / "gpu" / "stand_ins" / "sgl_kernel_cuda" / "scalar_type.py"
_spec = importlib.util.spec_from_file_location("sparkgate_test_sgl_kernel_scalar_type", OPS)
scalar_type = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = scalar_type  # dataclasses resolves the module's annotations through sys.modules
_spec.loader.exec_module(scalar_type)
T = scalar_type.scalar_types

CPP_IDS = {  # name in scalar_types: ScalarType::id() of the matching kName in scalar_type.hpp
    "float4_e2m1f": 562949953487106,
    "uint4": 1125899906843648,
    "uint4b8": 1125899907892224,
    "uint8b128": 1125899923621888,
    "float8_e4m3fn": 2814749767172868,
    "int4": 1125899906908928,
    "int8": 1125899906909952,
    "uint8": 1125899906844672,
    "float8_e8m0fnu": 2814749767106568,
    "float8_e5m2": 1125899906908677,
    "bfloat16": 1125899906909960,
    "float16": 1125899906910725,
    "float6_e3m2f": 562949953487363,
}


@pytest.mark.parametrize("name", sorted(CPP_IDS))
def test_id_is_the_one_the_jit_kernels_decode(name):
    assert getattr(T, name).id == CPP_IDS[name]


def test_marlin_compares_types_by_value():
    """marlin_utils.py checks `quant_type not in supported_types` and `== scalar_types.float4_e2m1f`."""
    fp4 = scalar_type.ScalarType.float_(2, 1, True, scalar_type.NanRepr.NONE)
    assert fp4 == T.float4_e2m1f and fp4 in [T.uint4b8, T.float4_e2m1f] and fp4 != T.float6_e3m2f
    assert (T.float4_e2m1f.size_bits, T.uint4b8.size_bits, T.uint8b128.size_bits) == (4, 4, 8)
