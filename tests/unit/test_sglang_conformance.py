"""Every SGLang string the gate and the simulator rely on exists in the installed SGLang 0.5.23 source, in
the file the fixture names; every fork-only one is absent from stock 0.5.23 (so it really is fork-only).

Source is searched, not imported, except where only Python can answer (ServerArgs' CLI destinations,
dotted hook targets). Log formats are compared with their holes normalized: an f-string's `{expr}`,
a `%s`/`%.2f` and a `{name:spec}` all become `{}`, so the literal parts and the hole positions must match.
"""

from __future__ import annotations

import ast
import importlib.util
import pkgutil
from functools import cache, lru_cache
from pathlib import Path

import pytest

from sparkgate.sglang import conformance, fork, proof

pytestmark = pytest.mark.sglang

@cache
def tree() -> proof.SourceTree:
    spec = importlib.util.find_spec("sglang")
    assert spec is not None and spec.submodule_search_locations, "sglang 0.5.23 is not installed"
    return proof.SourceTree(Path(next(iter(spec.submodule_search_locations))).parent)


@lru_cache(maxsize=1)
def server_arg_dests() -> frozenset[str]:
    from sparkgate.sglang.parser import build_sglang_parser

    return frozenset(action.dest for action in build_sglang_parser(with_fork_options=False)._actions)


def hook_target_errors() -> dict[str, str]:
    errors = {}
    for item in conformance.fixture()["hook_targets"].values():
        try:
            pkgutil.resolve_name(item["text"])
        except Exception as exc:
            errors[item["text"]] = repr(exc)
    return errors


@lru_cache(maxsize=1)
def findings() -> dict[tuple[str, str], proof.Finding]:
    """The product's proof (sparkgate/sglang/proof.py, the one the build guard runs) on the installed 0.5.23."""
    found = proof.prove_fixture(tree(), conformance.fixture(), fork=False, server_arg_fields=server_arg_dests(),
                                hook_target_errors=hook_target_errors())
    return {(f.section, f.key): f for f in found}


def entries(section: str) -> list[tuple[str, dict]]:
    return sorted(conformance.fixture()[section].items())


def ids(section: str) -> list[str]:
    return [key for key, _ in entries(section)]


# --- the fixture against SGLang's source -----------------------------------------------------------


def test_fixture_is_for_the_pinned_release():
    import sglang

    assert conformance.fixture()["sglang_version"] == conformance.SGLANG_VERSION == sglang.__version__
    assert set(conformance.fixture()) - {"sglang_version", "about"} == set(conformance.SECTIONS)


def test_every_entry_gets_a_finding():
    expected = {(section, key) for section in conformance.SECTIONS for key in conformance.fixture()[section]}
    assert set(findings()) == expected


PROVEN = [(section, key) for section in conformance.SECTIONS if section != "fork_only" for key, _ in entries(section)]


@pytest.mark.parametrize(("section", "key"), PROVEN, ids=[f"{s}.{k}" for s, k in PROVEN])
def test_entry_is_where_the_fixture_says(section, key):
    finding = findings()[(section, key)]
    assert finding.status == "found", finding.line()


@pytest.mark.parametrize(("key", "item"), entries("fork_only"), ids=ids("fork_only"))
def test_fork_only_is_absent_from_stock(key, item):
    finding = findings()[("fork_only", key)]
    assert finding.status == "stock_absent", finding.line()


def test_the_fork_view_of_stock_misses_exactly_the_fork_only_entries():
    as_fork = proof.prove_fixture(tree(), conformance.fixture(), fork=True)
    fork_only = conformance.fixture()["fork_only"]
    # Entries whose fork proof is a runtime check are reported as such, never as proven by source.
    runtime = {k for k, e in fork_only.items() if e.get("fork_proof", "").startswith("runtime")}
    assert {f.key for f in as_fork if f.status == "runtime_only"} == runtime
    assert {f.key for f in proof.problems(as_fork)} == set(fork_only) - runtime


def test_fork_only_code_must_be_code_not_a_comment_or_docstring(tmp_path):
    root = tmp_path / "site"
    nextn = root / "sglang" / "srt" / "models"
    nextn.mkdir(parents=True)
    (root / "sglang" / "__init__.py").write_text("")
    entry = {"kind": "method", "text": "set_lm_head_from_target", "absent_from": "sglang/srt/models/nextn.py"}
    source = nextn / "nextn.py"
    fake = proof.SourceTree(root)
    for text in ('# TODO: set_lm_head_from_target is not ported\n', '"""set_lm_head_from_target"""\n',
                 'NOTE = "set_lm_head_from_target"\n'):
        source.write_text(text)
        fake = proof.SourceTree(root)
        assert fake.fork_entry_in(entry, entry["absent_from"]) == "", text
    for text in ("class D:\n    def set_lm_head_from_target(self, t):\n        pass\n",
                 "class D: ...\nD.set_lm_head_from_target = print\n"):
        source.write_text(text)
        fake = proof.SourceTree(root)
        assert fake.fork_entry_in(entry, entry["absent_from"]) == "sglang/srt/models/nextn.py", text
    log = {"kind": "log", "text": "Online FP8 quantization enabled for lm_head.", "absent_from": "sglang"}
    source.write_text('# logger.info("Online FP8 quantization enabled for lm_head.")\n')
    assert proof.SourceTree(root).fork_entry_in(log, "sglang") == ""
    source.write_text('logger.info("Online FP8 quantization enabled for lm_head.")\n')
    assert proof.SourceTree(root).fork_entry_in(log, "sglang") == "sglang/srt/models/nextn.py"


# --- the search functions can fail ------------------------------------------------------------------


def test_misspelled_entries_are_not_found():
    t = tree()
    runner = "sglang/srt/model_executor/model_runner.py"
    assert t.log_format_in("Load weight end. elapsed={e:.2f} s", runner)
    assert not t.log_format_in("Load weights end. elapsed={e:.2f} s", runner)
    # A hole where SGLang has literal text (or the reverse) is a mismatch too.
    assert not t.log_format_in("Load weight end. elapsed={e:.2f} s, type=Bailing{x}", runner)
    assert t.log_format_in("Using {gemm} gemm for humming moe", "sglang/srt/layers/moe/moe_runner/humming.py")
    assert not t.log_format_in("Using indexed gemm for humming moe", "sglang/srt/layers/moe/moe_runner/humming.py")
    metrics_file = "sglang/srt/observability/metrics_collector.py"
    assert not t.string_in("sglang:spec_verify_call_total", metrics_file)
    assert not t.class_in("Mxfp4HummingMoeMethod", "sglang/srt/layers/quantization/mxfp4_humming_moe.py")
    assert not t.dtype_in("torch.float8_e4m3", "sglang/srt/layers/quantization/fp8.py")
    assert "SGLANG_EXPOSE_OWN_ENV_VAR" not in t.declared_envs()
    assert "moe_runner_backends" not in server_arg_dests()
    with pytest.raises((ImportError, AttributeError)):
        pkgutil.resolve_name("sglang.srt.model_executor.model_runner.ModelRunner.load_models")


def test_an_entry_in_another_file_is_reported_moved_with_its_new_file():
    fixture = {"metrics": {"m": {"text": "sglang:spec_verify_calls_total", "source": "sglang/srt/environ.py"}}}
    (finding,) = proof.prove_fixture(tree(), fixture, fork=False)
    assert finding.status == "moved" and finding.where == "sglang/srt/observability/metrics_collector.py"
    assert finding.loses_evidence  # the fixture names the file: until it is updated, the proof is not the fixture's


def test_a_log_format_must_start_the_message_and_a_docstring_is_never_a_log_line(tmp_path):
    root = tmp_path / "site"
    (root / "sglang" / "srt").mkdir(parents=True)
    (root / "sglang" / "__init__.py").write_text("")
    source = root / "sglang" / "srt" / "server.py"
    ready = "The server is fired up and ready to roll!"
    for text, found in ((f'logger.info("{ready}")\n', True), (f'logger.info(f"[{{rank}}] {ready}")\n', False),
                        (f'def f():\n    """{ready}"""\n', False)):
        source.write_text(text)
        assert proof.SourceTree(root).log_format_in(ready, "sglang/srt/server.py") is found, text
    # A part of a longer record may sit anywhere inside it.
    source.write_text('msg = f"Decode batch, {x}, accept len: {a:.2f}, accept rate: {r:.2f}, "\n')
    part = "accept len: {a:.2f}, accept rate: {r:.2f}, "
    assert proof.SourceTree(root).log_format_in(part, "sglang/srt/server.py", part=True)
    assert not proof.SourceTree(root).log_format_in(part, "sglang/srt/server.py")


def test_moved_is_searched_only_in_the_server_tree():
    """The diffusion server, the benchmarks and the tests carry look-alikes of the server's strings."""
    fixture = {"log_formats": {"r": {"text": "The server is fired up and ready to roll!", "source": "sglang/x.py"}}}
    (finding,) = proof.prove_fixture(tree(), fixture, fork=False)
    assert finding.status == "moved" and finding.where.startswith("sglang/srt/") and finding.loses_evidence


# --- the consumers read the fixture ------------------------------------------------------------------


def test_fork_module_lists_exactly_the_fixture_fork_only_entries():
    assert conformance.fork_only_of_kind("env") == fork.FORK_ONLY_ENV
    assert conformance.fork_only("fp8_lm_head_log") == fork.FP8_LM_HEAD_LOG
    assert conformance.fork_only("fp8_lm_head_weight_scale") == fork.FP8_LM_HEAD_SCALE_ATTR


def test_probe_literals_match_the_fixture():
    """The probe runs inside the engine image and reads nothing from sparkgate, so its own literals are held
    to the fixture here."""
    from sparkgate_probe import facts, plugin

    targets = {e["text"] for e in conformance.fixture()["hook_targets"].values()}
    assert set(plugin.HOOK_TARGETS) <= targets
    assert set(facts.SCALE_ATTRS) == {conformance.fork_only("fp8_lm_head_weight_scale"),
                                      conformance.text("attributes", "weight_scale_inv")}
    hooks_source = Path(importlib.util.find_spec("sparkgate_probe.hooks").origin).read_text(encoding="utf-8")
    for key in ("fused_moe", "unwrap_lora_layer"):
        module, _, name = conformance.hook_target(key).rpartition(".")
        assert f"from {module} import {name}" in hooks_source, key
    for key in ("is_draft_worker", "target_worker", "draft_runner", "runner_backend"):
        assert conformance.text("attributes", key) in Path(facts.__file__).read_text() + hooks_source, key


CHECKER = ("sparkgate/optimizations", "sparkgate/evidence", "sparkgate/sglang/phases.py")


def test_checker_spells_no_sglang_string_itself():
    """The checker gets SGLang's strings from the fixture: none of them appears as a string literal in
    sparkgate/optimizations, sparkgate/evidence or sparkgate/sglang/phases.py (prose in hints may mention them)."""
    root = Path(__file__).resolve().parents[2]
    fixture = conformance.fixture()
    wanted = {e["text"] for section in ("log_formats", "metrics", "classes", "dtypes", "fork_only", "hook_targets")
              for e in fixture[section].values()}
    wanted |= {proof.format_template(e["text"]).partition("{}")[0].strip() for e in fixture["log_formats"].values()} - {""}
    files = [p for entry in CHECKER for p in ((root / entry).glob("*.py") if (root / entry).is_dir() else [root / entry])]
    assert files
    spelled = {}
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in wanted:
                spelled.setdefault(path.name, set()).add(node.value)
    assert not spelled, spelled
