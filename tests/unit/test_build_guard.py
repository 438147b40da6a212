"""`sparkgate build-guard` refuses stock SGLang and passes the fork, proven on installed code.

The Spark Dockerfile runs the guard as its last build step; the real fork cannot be built here (arm64 CUDA
base). So: against the stock sglang==0.5.23 installed in the test venv it must name every missing fork fact
and exit non-zero, and against a stand-in fork - stock SGLang plus the few fork patches (the FP8 env declared
in Envs, the patched bailing_moe_v3/bailing_moe_nextn sources laid over sglang.srt.models, and a
humming-kernels distribution) - it must pass, so it is not simply failing everywhere.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sparkgate import cli
from sparkgate.cli import EXIT_INVALID
from sparkgate.images import load_lock
from sparkgate.sglang import build_guard
from sparkgate.sglang.parser import SGLANG_VERSION
from tests.unit import sglang_copies

pytestmark = pytest.mark.sglang

ENV_CHECK = "declares SGLANG_ENABLE_FP8_LM_HEAD"
LOG_CHECK = "FP8 LM-head log line"
NEXTN_CHECK = "BailingMoeForCausalLMNextN.set_lm_head_from_target"
HOOKS_CHECK = "probe hook targets"
HUMMING_CHECK = "humming-kernels installed"
FORK_FACTS = [ENV_CHECK, LOG_CHECK, NEXTN_CHECK]
# Fork-only fixture entries stock 0.5.23 lacks where the fork has them (weight_scale may be anywhere in the fork).
STOCK_MISSING_FIXTURE = ["fixture fork_only.draft_lm_head_module_share", "fixture fork_only.fp8_lm_head_env",
                         "fixture fork_only.fp8_lm_head_log"]
HUMMING_PIN = load_lock().python_packages["humming-kernels"]

# The stand-in fork. `apply(root)` is also the body of a sitecustomize.py, so a `sparkgate build-guard`
# subprocess sees the same fork as the in-process tests.
SHIM = textwrap.dedent('''
    import importlib, importlib.abc, importlib.util, os, sys

    class ForkModels(importlib.abc.MetaPathFinder):
        """Serves the patched model modules from the overlay (sglang.srt.models is a namespace package)."""

        def __init__(self, directory):
            self.directory = directory

        def find_spec(self, fullname, path=None, target=None):
            package, _, name = fullname.rpartition(".")
            candidate = os.path.join(self.directory, name + ".py")
            if package == "sglang.srt.models" and os.path.isfile(candidate):
                return importlib.util.spec_from_file_location(fullname, candidate)
            return None

    def apply(root, parts):
        if "env" in parts:
            from sglang.srt.environ import EnvBool, Envs
            setattr(Envs, "SGLANG_ENABLE_FP8_LM_HEAD", EnvBool(False))
        sys.meta_path.insert(0, ForkModels(os.path.join(root, "models")))
        sys.path.insert(0, os.path.join(root, "site"))
        importlib.invalidate_caches()
''')


def _fork_tree(root: Path, parts: set[str], humming_version: str = HUMMING_PIN) -> Path:
    """Overlay sources with the chosen fork patches, built from the installed stock sources."""
    models = Path(importlib.util.find_spec("sglang.srt.models.bailing_moe_v3").origin).parent
    overlay = root / "models"
    overlay.mkdir(parents=True)
    v3 = (models / "bailing_moe_v3.py").read_text(encoding="utf-8")
    if "log" in parts:
        v3 += '\n\ndef _fork_fp8_lm_head_note():\n    logger.info("Online FP8 quantization enabled for lm_head.")\n'
    (overlay / "bailing_moe_v3.py").write_text(v3, encoding="utf-8")
    nextn = (models / "bailing_moe_nextn.py").read_text(encoding="utf-8")
    if "share" in parts:
        nextn += textwrap.dedent('''

            def _fork_set_lm_head_from_target(self, target):
                self.lm_head = target.lm_head


            BailingMoeForCausalLMNextN.set_lm_head_from_target = _fork_set_lm_head_from_target
        ''')
    (overlay / "bailing_moe_nextn.py").write_text(nextn, encoding="utf-8")
    site = root / "site"
    site.mkdir()
    if "humming" in parts:
        sglang_copies.add_humming_distribution(site, humming_version)
    (root / "shim.py").write_text(SHIM, encoding="utf-8")
    (root / "sitecustomize.py").write_text(SHIM + f"\napply({str(root)!r}, {sorted(parts)!r})\n", encoding="utf-8")
    return root


@pytest.fixture
def fork(tmp_path):
    """fork(parts) applies the stand-in fork in this process; everything is restored afterwards."""
    from sglang.srt import environ

    saved_path, saved_meta_path = list(sys.path), list(sys.meta_path)
    swapped = [f"sglang.srt.models.{name}" for name in ("bailing_moe_v3", "bailing_moe_nextn")]
    saved_modules = {name: sys.modules.pop(name) for name in swapped if name in sys.modules}

    def apply(parts: set[str], **kwargs) -> None:
        root = _fork_tree(tmp_path / "fork", parts, **kwargs)
        spec = importlib.util.spec_from_file_location("sparkgate_test_fork_shim", root / "shim.py")
        shim = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(shim)
        shim.apply(str(root), sorted(parts))

    yield apply
    if "SGLANG_ENABLE_FP8_LM_HEAD" in vars(environ.Envs):
        delattr(environ.Envs, "SGLANG_ENABLE_FP8_LM_HEAD")
    sys.path[:] = saved_path
    sys.meta_path[:] = saved_meta_path
    for name in swapped:
        sys.modules.pop(name, None)
    sys.modules.update(saved_modules)
    importlib.invalidate_caches()


def _statuses(results) -> dict[str, bool]:
    return {r.name: r.ok for r in results}


def test_the_venv_holds_stock_sglang():
    # What the stock tests below prove depends on it; a different sglang is an error here, never a skip.
    assert importlib.metadata.version("sglang") == SGLANG_VERSION


def test_stock_sglang_is_refused_naming_exactly_the_fork_only_items():
    results = build_guard.run_all()
    status = _statuses(results)
    failed = {name for name, ok in status.items() if not ok}
    # The fork facts, their fixture entries, the fork's env var, humming-kernels (absent from the test venv too) and
    # the two summaries: nothing else. The flag manifest and every stock fixture entry are proven.
    assert failed == {*FORK_FACTS, *STOCK_MISSING_FIXTURE, "env SGLANG_ENABLE_FP8_LM_HEAD", HUMMING_CHECK,
                      "evidence fixture", "env manifest"}, failed
    assert status[HOOKS_CHECK] is True and status["flag manifest"] is True
    argv_checks = [name for name in status if name.startswith("argv of ")]
    assert argv_checks and all(status[name] for name in argv_checks), results
    installed = str(Path(importlib.util.find_spec("sglang").origin).parent)
    details = {r.name: r.detail for r in results}
    assert installed in details[ENV_CHECK] and installed in details[LOG_CHECK]
    assert "sglang/srt/models/bailing_moe_nextn.py" in details["fixture fork_only.draft_lm_head_module_share"]
    line = build_guard.refusal(results)
    assert line is not None and "\n" not in line
    assert all(name in line for name in FORK_FACTS)


def test_stand_in_fork_passes(fork):
    fork({"env", "log", "share", "humming"})
    results = build_guard.run_all(facts=False)
    assert all(r.ok for r in results), [r for r in results if not r.ok]
    assert build_guard.refusal(results) is None
    assert "not imported" in {r.name: r.detail for r in results}[HUMMING_CHECK]


@pytest.mark.parametrize("missing", ["env", "log", "share", "humming"])
def test_each_missing_fork_part_alone_fails_the_guard(fork, missing):
    fork({"env", "log", "share", "humming"} - {missing})
    expected = {"env": ENV_CHECK, "log": LOG_CHECK, "share": NEXTN_CHECK, "humming": HUMMING_CHECK}[missing]
    failed = [r.name for r in build_guard.run_all(facts=False) if not r.ok]
    assert failed == [expected]


def test_humming_at_another_version_than_the_pin_fails(fork):
    fork({"env", "log", "share", "humming"}, humming_version="0.1.19")
    (result,) = [r for r in build_guard.run_all(facts=False) if r.name == HUMMING_CHECK]
    assert not result.ok and f"0.1.19 installed, images.lock.yaml pins {HUMMING_PIN}" in result.detail


def test_unresolvable_hook_target_fails(fork, monkeypatch):
    fork({"env", "log", "share", "humming"})
    from sparkgate_probe import plugin

    renamed = "sglang.srt.speculative.eagle_worker_v2.EagleDraftWorker.init_lm_head_renamed"
    monkeypatch.setitem(plugin.HOOK_TARGETS, renamed, lambda *a: None)
    (result,) = [r for r in build_guard.run_all(facts=False) if r.name == HOOKS_CHECK]
    assert not result.ok and renamed in result.detail


def test_argv_the_parser_rejects_fails(fork, monkeypatch):
    fork({"env", "log", "share", "humming"})
    from sparkgate.bundle import render
    real = render.render_files

    def with_unknown_flag(loaded, options):
        files = dict(real(loaded, options))
        files["argv.json"] = files["argv.json"].replace('"--model-path"', '"--turbo", "--model-path"', 1)
        return files

    monkeypatch.setattr(render, "render_files", with_unknown_flag)
    failed = {r.name: r.detail for r in build_guard.run_all(facts=False) if not r.ok}
    assert failed and all(name.startswith("argv of ") for name in failed)
    assert all("unrecognized arguments: --turbo" in detail for detail in failed.values())


def test_unknown_image_key_fails():
    (result,) = build_guard.run_all("no-such-image")
    assert not result.ok and "spark-fork" in result.detail


# --- the console script the Dockerfile's `RUN sparkgate build-guard` calls, on whole copies of SGLang ------


def _guard_cli(pythonpath: Path | None = None) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).parent / "sparkgate"
    argv = [str(script), "build-guard"] if script.exists() else [sys.executable, "-m", "sparkgate", "build-guard"]
    env = sglang_copies.pythonpath_env(pythonpath) if pythonpath is not None else dict(os.environ)
    return subprocess.run(argv, capture_output=True, text=True, env=env, check=False, timeout=600)


def _reported(stdout: str) -> dict[str, str]:
    """check name -> 'ok' | 'MISSING', from lines like `[MISSING] name: detail`."""
    result = {}
    for line in stdout.splitlines():
        if line.startswith("[") and "] " in line:
            status, _, rest = line[1:].partition("] ")
            result[rest.partition(": ")[0]] = status
    return result


@pytest.fixture(scope="module")
def stand_in_fork(tmp_path_factory):
    return sglang_copies.make_copy(tmp_path_factory.mktemp("fork"), fork_parts=sglang_copies.FORK_PARTS)


def test_the_command_refuses_stock_sglang_with_one_line(capsys):
    """`sparkgate build-guard` as the Dockerfile runs it, in this process (the venv's SGLang is stock 0.5.23, already
    imported by the tests above; the console script itself runs in the two tests below)."""
    code = cli.main(["build-guard"])
    out, err = capsys.readouterr()
    assert code == EXIT_INVALID, out + err
    last = err.strip().splitlines()[-1]
    assert last.startswith("sparkgate build guard: refusing the image: missing ")
    assert all(name in last for name in FORK_FACTS) and "Traceback" not in err


def test_cli_passes_a_whole_stand_in_fork(stand_in_fork):
    proc = _guard_cli(stand_in_fork)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    reported = _reported(proc.stdout)
    assert set(reported.values()) == {"ok"}
    assert {*FORK_FACTS, HOOKS_CHECK, HUMMING_CHECK, "evidence fixture", "flag manifest", "env manifest"} <= set(reported)
    assert f"proven in {stand_in_fork}" in proc.stdout  # the copy was proven, not the venv's SGLang
    # What source cannot prove is said, with the runtime check that proves it, never counted as found.
    (line,) = [x for x in proc.stdout.splitlines() if x.startswith("[ok] fixture fork_only.fp8_lm_head_weight_scale")]
    assert "not provable from source" in line and "fp8_lm_head.target_head" in line


def test_cli_names_each_altered_log_format_metric_and_field(tmp_path):
    root = sglang_copies.make_copy(tmp_path, fork_parts=sglang_copies.FORK_PARTS, altered=True)
    proc = _guard_cli(root)
    assert proc.returncode == EXIT_INVALID, proc.stdout + proc.stderr
    failed = {name for name, status in _reported(proc.stdout).items() if status == "MISSING"}
    altered = {f"fixture {entry}" for entry in sglang_copies.ALTERED_ENTRIES}
    # Renaming the field renames its flag: the manifest diff names both spellings.
    assert failed == altered | {"flag --decode-log-interval", "flag --decode-log-every", "evidence fixture",
                                "flag manifest"}, proc.stdout
    details = {line.partition("] ")[2].partition(": ")[0]: line for line in proc.stdout.splitlines()}
    assert "sglang/srt/model_executor/model_runner.py" in details["fixture log_formats.load_weight_end"]
    assert "sglang/srt/observability/metrics_collector.py" in details["fixture metrics.spec_accept_length"]
    last = proc.stderr.strip().splitlines()[-1]
    assert all(name in last for name in altered)


def test_the_dspark_drafter_class_is_checked_for_the_image_that_runs_dspark():
    assert build_guard.dspark_drafter_classes("spark-fork") == {"LingDSparkModel"}
    (result,) = [r for r in build_guard.run_all(facts=False) if r.name == "DSpark drafter class LingDSparkModel"]
    assert result.ok, result.detail  # SGLang 0.5.23 registers it (sglang/srt/models/dspark.py EntryClass)


@pytest.mark.parametrize(("source", "why"), [
    ("class LingDSparkModel:\n    pass\n\nEntryClass = [object]\n", "not in EntryClass"),
    ("class Qwen3DSparkModel:\n    pass\n\nEntryClass = [Qwen3DSparkModel]\n", "not defined"),
])
def test_a_dspark_module_without_the_registered_drafter_fails(tmp_path, source, why):
    module = tmp_path / "dspark.py"
    module.write_text(source)
    result = build_guard.check_dspark_drafter_class("LingDSparkModel", module)
    assert not result.ok and why in result.detail
