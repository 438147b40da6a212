"""Copies of the installed sglang==0.5.23, changed on purpose, for the build guard and `invoke sglang.diff`.

A copy is a directory holding an `sglang` package; put it first on PYTHONPATH and a child Python imports it
instead of the venv's. Files are hard-linked (the package is 4,700 modules) and a changed file is written anew,
so the venv's SGLang is never touched.

- fork parts (the stand-in for the inclusionAI fork, which cannot be installed here): `env` declares
  SGLANG_ENABLE_FP8_LM_HEAD in Envs, `log` adds the fork's FP8 LM-head log line to bailing_moe_v3.py, `share`
  gives BailingMoeForCausalLMNextN `set_lm_head_from_target`, `humming` adds a humming-kernels distribution.
- ALTERATIONS: one log format, one metric name and one ServerArgs field changed as an upgrade might;
  READER_ALTERATIONS: changes each read by named checks only, and a changed default (`alterations=`).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import textwrap
from pathlib import Path

from sparkgate.images import load_lock

FORK_PARTS = frozenset({"env", "log", "share", "humming"})
HUMMING_PIN = load_lock().python_packages["humming-kernels"]

# relative file -> (old text, new text); each must occur in 0.5.23 exactly where written.
ALTERATIONS = {
    "sglang/srt/model_executor/model_runner.py": ('f"Load weight end. "', 'f"Load weights end. "'),
    "sglang/srt/observability/metrics_collector.py": ('name="sglang:spec_accept_length",',
                                                      'name="sglang:spec_accept_len",'),
    "sglang/srt/arg_groups/fields/observability.py": ("    decode_log_interval: A[", "    decode_log_every: A["),
}
# What each alteration takes away, as the fixture names it.
ALTERED_ENTRIES = {"log_formats.load_weight_end", "metrics.spec_accept_length", "server_args.decode_log_interval"}
# For the readers `invoke sglang.diff` names (the checks' READS): the target's CUDA-graph capture line (engine.cuda_graph_capture_log
# reads it), the CUDA-graph pass counter (engine.cuda_graph_passes), a method the probe hooks (EAGLE's
# init_lm_head) and the default of --max-running-requests (None -> 48; engine.batch1 reads the field).
READER_ALTERATIONS = {
    "sglang/srt/model_executor/model_runner_components/cuda_graph_setup.py": (
        'f"Capture {capture_name} {graph_backend[model_runner.device]} begin. "',
        'f"Capture {capture_name} {graph_backend[model_runner.device]} start. "'),
    "sglang/srt/observability/metrics_collector.py": ('name="sglang:cuda_graph_passes_total",',
                                                      'name="sglang:cuda_graph_pass_total",'),
    "sglang/srt/speculative/eagle_worker_v2.py": ("    def init_lm_head(self):", "    def init_draft_lm_head(self):"),
    "sglang/srt/arg_groups/fields/schedule.py": ('"The maximum number of running requests.",\n    ] = None',
                                                 '"The maximum number of running requests.",\n    ] = 48'),
}
READER_ENTRIES = {"log_formats.capture_begin", "metrics.cuda_graph_passes", "hook_targets.init_lm_head"}


def installed_root() -> Path:
    spec = importlib.util.find_spec("sglang")
    assert spec is not None and spec.submodule_search_locations, "sglang 0.5.23 is not installed"
    return Path(next(iter(spec.submodule_search_locations))).parent


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _rewrite(root: Path, relative: str, old: str, new: str) -> None:
    path = root / relative
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"{relative}: {old!r} occurs {text.count(old)} times; the copy would be wrong"
    path.unlink()  # a hard link: write a new file, never through the link into the venv
    path.write_text(text.replace(old, new), encoding="utf-8")


def _append(root: Path, relative: str, addition: str) -> None:
    path = root / relative
    text = path.read_text(encoding="utf-8")
    path.unlink()
    path.write_text(text + addition, encoding="utf-8")


def add_humming_distribution(site: Path, version: str = HUMMING_PIN) -> None:
    """A humming-kernels distribution whose module must never be imported (the build has no GPU)."""
    (site / "humming").mkdir()
    (site / "humming" / "__init__.py").write_text("raise ImportError('needs libcuda: the guard must not import me')\n")
    dist = site / f"humming_kernels-{version}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: humming-kernels\nVersion: {version}\n")


def make_copy(root: Path, *, fork_parts: frozenset[str] = frozenset(), altered: bool = False,
              humming_version: str = HUMMING_PIN, alterations: dict[str, tuple[str, str]] | None = None) -> Path:
    """Build a copy under `root` and return it (the directory to put on PYTHONPATH)."""
    # Compiled modules are linked too: a linked source keeps its mtime and size, so its .pyc stays valid and the
    # child imports without compiling 4,700 modules; a rewritten source no longer matches its .pyc, so Python
    # compiles it afresh and replaces the link (importlib writes a new file, then renames: never through the link).
    shutil.copytree(installed_root() / "sglang", root / "sglang", copy_function=_link_or_copy)
    if "env" in fork_parts:
        _rewrite(root, "sglang/srt/environ.py", "class Envs:\n",
                 "class Envs:\n    SGLANG_ENABLE_FP8_LM_HEAD = EnvBool(False)\n")
    if "log" in fork_parts:
        _append(root, "sglang/srt/models/bailing_moe_v3.py",
                '\n\ndef _fork_fp8_lm_head_note():\n    logger.info("Online FP8 quantization enabled for lm_head.")\n')
    if "share" in fork_parts:
        _append(root, "sglang/srt/models/bailing_moe_nextn.py", textwrap.dedent('''

            def _fork_set_lm_head_from_target(self, target):
                self.lm_head = target.lm_head


            BailingMoeForCausalLMNextN.set_lm_head_from_target = _fork_set_lm_head_from_target
        '''))
    if "humming" in fork_parts:
        add_humming_distribution(root, humming_version)
    for relative, (old, new) in {**(ALTERATIONS if altered else {}), **(alterations or {})}.items():
        _rewrite(root, relative, old, new)
    return root


def pythonpath_env(root: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH", "")) if p)
    return env
