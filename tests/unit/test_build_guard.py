"""`sparkgate build-guard` refuses a stock SGLang and passes a patched one.

The Spark Dockerfile runs the guard as a build step. Against stock sglang==0.5.23 (installed in the
test venv by scripts/bootstrap) it must report both fork patches missing and exit non-zero: that is
the proof a stock image could not slip through. A minimal stand-in source tree with the patches (and a
`humming` module) must pass, so the guard is not simply failing everywhere.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sparkgate import build_guard
from sparkgate.cli import EXIT_INVALID
from sparkgate.sglang_cli import SGLANG_VERSION

ENV_CHECK = "declares SGLANG_ENABLE_FP8_LM_HEAD"
NEXTN_CHECK = "BailingMoeForCausalLMNextN.set_lm_head_from_target"
HUMMING_CHECK = "import humming"


def _guard_cli(env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The console script the Dockerfile's `RUN sparkgate build-guard` calls (python -m as fallback)."""
    script = Path(sys.executable).parent / "sparkgate"
    argv = [str(script), "build-guard"] if script.exists() else [sys.executable, "-m", "sparkgate", "build-guard"]
    return subprocess.run(argv, capture_output=True, text=True, env=env, check=False)


def _reported(stdout: str) -> dict[str, str]:
    """check name -> 'ok' | 'MISSING', from lines like `[MISSING] name: detail`."""
    result = {}
    for line in stdout.splitlines():
        if line.startswith("[") and "] " in line:
            status, _, rest = line[1:].partition("] ")
            result[rest.partition(": ")[0]] = status
    return result


def _stock_sglang_installed() -> bool:
    if importlib.util.find_spec("sglang") is None:
        return False
    return importlib.metadata.version("sglang") == SGLANG_VERSION


stock = pytest.mark.skipif(not _stock_sglang_installed(), reason=f"needs stock sglang=={SGLANG_VERSION} installed")


@pytest.mark.sglang
@stock
def test_stock_sglang_fails_both_fork_checks_in_process() -> None:
    results = {r.name: r for r in build_guard.run_all()}
    assert not results[ENV_CHECK].ok
    assert "Envs has no SGLANG_ENABLE_FP8_LM_HEAD" in results[ENV_CHECK].detail
    assert not results[NEXTN_CHECK].ok
    assert "missing" in results[NEXTN_CHECK].detail
    # Both verdicts come from reading the installed stock sources, not from a failed lookup.
    installed = str(Path(importlib.util.find_spec("sglang").origin).parent)
    assert installed in results[ENV_CHECK].detail and installed in results[NEXTN_CHECK].detail


@pytest.mark.sglang
@stock
def test_stock_sglang_is_refused_by_the_cli() -> None:
    proc = _guard_cli()
    assert proc.returncode == EXIT_INVALID, proc.stdout + proc.stderr
    reported = _reported(proc.stdout)
    assert reported[ENV_CHECK] == "MISSING"
    assert reported[NEXTN_CHECK] == "MISSING"
    assert "refusing the image" in proc.stderr


FORK_ENVIRON = """
class EnvBool:
    def __init__(self, default):
        self.default = default


class Envs:
    SGLANG_ENABLE_JIT_DEEPGEMM = EnvBool(True)
    SGLANG_ENABLE_FP8_LM_HEAD = EnvBool(False)
"""

FORK_NEXTN = """
class BailingMoeForCausalLMNextN:
    def forward(self, *args):
        return None

    def set_lm_head_from_target(self, target):
        self.lm_head = target.lm_head
"""

STOCK_NEXTN = """
class BailingMoeForCausalLMNextN:
    def forward(self, *args):
        return None
"""


def _source_tree(root: Path, nextn: str, with_humming: bool) -> Path:
    files = {
        "sglang/__init__.py": "",
        "sglang/srt/__init__.py": "",
        "sglang/srt/environ.py": FORK_ENVIRON,
        "sglang/srt/models/__init__.py": "",
        "sglang/srt/models/bailing_moe_nextn.py": nextn,
    }
    # Without Humming, the stand-in shadows any installed humming-kernels with a module whose import fails,
    # exactly as a missing or broken install does: the test then never depends on the venv.
    files["humming/__init__.py"] = (
        "KERNELS = 'stand-in'\n" if with_humming else "raise ImportError('No module named humming (stand-in)')\n"
    )
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return root


def _env_with(path: Path) -> dict[str, str]:
    # The stand-in tree comes first on sys.path, ahead of any sglang installed in the venv.
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(path), os.environ.get("PYTHONPATH", "")])}


def test_patched_tree_passes(tmp_path: Path) -> None:
    tree = _source_tree(tmp_path, FORK_NEXTN, with_humming=True)
    proc = _guard_cli(_env_with(tree))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _reported(proc.stdout) == {ENV_CHECK: "ok", NEXTN_CHECK: "ok", HUMMING_CHECK: "ok"}


@pytest.mark.parametrize(
    ("nextn", "with_humming", "missing"),
    [(STOCK_NEXTN, True, NEXTN_CHECK), (FORK_NEXTN, False, HUMMING_CHECK)],
    ids=["nextn-shares-tensor-only", "no-humming-kernels"],
)
def test_each_missing_piece_alone_fails_the_guard(tmp_path: Path, nextn: str, with_humming: bool, missing: str) -> None:
    tree = _source_tree(tmp_path, nextn, with_humming)
    proc = _guard_cli(_env_with(tree))
    assert proc.returncode == EXIT_INVALID
    reported = _reported(proc.stdout)
    assert [name for name, status in reported.items() if status == "MISSING"] == [missing]
