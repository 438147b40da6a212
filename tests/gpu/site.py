"""The CUDA server's private PYTHONPATH entry (tests/gpu): test-only stand-ins, never installed, never shipped.

- `sgl_kernel`: the CPU stand-in of tests/real/stand_ins (the import-time names, the `*_cpu` ops) plus the torch
  versions of the CUDA ops in tests/gpu/stand_ins/sgl_kernel_cuda, re-exported at the package's top level; every
  other name imports and raises when called (`_loud.py`).
- `cutlass`: import-only (SGLang imports CuTe DSL modules on CUDA whose kernels need SM100).
- `flash_mla`: import-only (the EAGLE worker imports the FlashMLA backend while capturing the draft-extend graph).
- the engagement probe (probe/src) with the entry point SGLang's plugin loader looks for, when the interpreter
  does not have it installed (the GPU machine has no pip index).
- `sglang_kernel-*.dist-info`: SGLang asserts sglang-kernel >= 0.4.9 at start on CUDA
  (sglang/srt/entrypoints/engine.py); the stand-in declares the version it stands in for.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CPU_STAND_IN = REPO / "tests" / "real" / "stand_ins" / "sgl_kernel"
CUDA_OPS = HERE / "stand_ins" / "sgl_kernel_cuda"
CUTLASS = HERE / "stand_ins" / "cutlass"
FLASH_MLA = HERE / "stand_ins" / "flash_mla"
PROBE_SRC = REPO / "probe" / "src" / "sparkgate_probe"
STANDS_IN_FOR = "0.4.10"  # the sglang-kernel version SGLang 0.5.23's setup pins
# Where tests/gpu/run installed SGLang and the packages the GPU machine lacks (a --target directory).
SGLANG_SITE_ENV = "SPARKGATE_GPU_SGLANG_SITE"
_IGNORE = shutil.ignore_patterns("__pycache__")


def sglang_site() -> list[str]:
    site = os.environ.get(SGLANG_SITE_ENV, "")
    return [site] if site else []


def cuda_op_modules() -> list[str]:
    """The stand-in's CUDA op modules (`_*.py` of sgl_kernel_cuda, the loud stubs last, not among them)."""
    return sorted(p.stem for p in CUDA_OPS.glob("_*.py") if p.stem not in ("__init__", "_loud"))


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def write_cuda_site_dir(site: Path) -> Path:
    kernel = site / "sgl_kernel"
    shutil.copytree(CPU_STAND_IN, kernel, ignore=_IGNORE, dirs_exist_ok=True)
    shutil.copytree(CUDA_OPS, kernel, ignore=_IGNORE, dirs_exist_ok=True)
    exports = "".join(f"from sgl_kernel.{name} import *  # noqa: F403\n" for name in cuda_op_modules())
    init = (CPU_STAND_IN / "__init__.py").read_text() + (
        "\n# tests/gpu: the CUDA ops' torch versions, then every other name loud (tests/gpu/site.py)\n"
        + exports
        + "from sgl_kernel import _loud\n\n_loud.install(globals())\n"
    )
    _write(kernel / "__init__.py", init)
    shutil.copytree(CUTLASS, site / "cutlass", ignore=_IGNORE, dirs_exist_ok=True)
    shutil.copytree(FLASH_MLA, site / "flash_mla", ignore=_IGNORE, dirs_exist_ok=True)
    _write(site / f"sglang_kernel-{STANDS_IN_FOR}.dist-info" / "METADATA",
           f"Metadata-Version: 2.1\nName: sglang-kernel\nVersion: {STANDS_IN_FOR}\n"
           "Summary: sparkgate tests/gpu torch stand-in (not the real sgl-kernel)\n")
    _write(site / f"sglang_kernel-{STANDS_IN_FOR}.dist-info" / "RECORD", "")
    if importlib.util.find_spec("sparkgate_probe") is None:
        shutil.copytree(PROBE_SRC, site / "sparkgate_probe", ignore=_IGNORE, dirs_exist_ok=True)
        dist = site / "sparkgate_probe-0.1.0.dist-info"
        _write(dist / "METADATA", "Metadata-Version: 2.1\nName: sparkgate-probe\nVersion: 0.1.0\n")
        _write(dist / "entry_points.txt", "[sglang.srt.plugins]\nengagement_probe = sparkgate_probe.plugin:register\n")
        _write(dist / "RECORD", "")
    return site
