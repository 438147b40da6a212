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
import re
import string
from functools import cache, lru_cache
from pathlib import Path

import pytest

from sparkgate import conformance, fork

pytestmark = pytest.mark.sglang

_PERCENT_SPEC = re.compile(r"%(?:\([^)]*\))?[-#0 +]*\d*(?:\.\d+)?[sdifgeExXr]")
_BRACE_FIELD = re.compile(r"\{[^{}]*\}")


def site_root() -> Path:
    spec = importlib.util.find_spec("sglang")
    assert spec is not None and spec.submodule_search_locations, "sglang 0.5.23 is not installed"
    return Path(next(iter(spec.submodule_search_locations))).parent


def source_path(relative: str) -> Path:
    path = site_root() / relative
    assert path.is_file(), f"{relative} does not exist in the installed SGLang"
    return path


class _Strings(ast.NodeVisitor):
    """Collect a file's string literals: raw constants, and templates with holes as `{}`."""

    def __init__(self) -> None:
        self.constants: set[str] = set()
        self.templates: set[str] = set()
        self.classes: set[str] = set()
        self.attributes: set[str] = set()
        self.torch_attrs: set[str] = set()

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                parts.append(value.value)
            else:
                parts.append("{}")
        self.templates.add("".join(parts))
        # Literal pieces of an f-string are also plain strings (and nested expressions hold more).
        for value in node.values:
            if isinstance(value, ast.FormattedValue):
                self.visit(value.value)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str):
            self.constants.add(node.value)
            self.templates.add(_BRACE_FIELD.sub("{}", _PERCENT_SPEC.sub("{}", node.value)))

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.classes.add(node.name)
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self.attributes.add(node.attr)
        if isinstance(node.value, ast.Name) and node.value.id == "torch":
            self.torch_attrs.add(node.attr)
        self.generic_visit(node)


@cache
def scan(relative: str) -> _Strings:
    visitor = _Strings()
    visitor.visit(ast.parse(source_path(relative).read_text(encoding="utf-8"), filename=relative))
    return visitor


def format_template(fmt: str) -> str:
    """A fixture format with every hole as `{}`."""
    return "".join(literal + ("{}" if field is not None else "")
                   for literal, field, _spec, _conv in string.Formatter().parse(fmt))


def log_format_in_source(fmt: str, relative: str) -> bool:
    wanted = format_template(fmt)
    return any(wanted in template for template in scan(relative).templates)


def string_in_source(text: str, relative: str) -> bool:
    return text in scan(relative).constants


def class_in_source(name: str, relative: str) -> bool:
    return name in scan(relative).classes


def attribute_in_source(name: str, relative: str) -> bool:
    return name in scan(relative).attributes


def dtype_in_source(text: str, relative: str) -> bool:
    prefix, _, name = text.partition(".")
    return prefix == "torch" and name in scan(relative).torch_attrs


@lru_cache(maxsize=1)
def declared_envs() -> frozenset[str]:
    """Names assigned in `class Envs` of sglang/srt/environ.py (SGLang's declared variables)."""
    tree = ast.parse(source_path("sglang/srt/environ.py").read_text(encoding="utf-8"))
    envs = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Envs")
    names = set()
    for statement in envs.body:
        targets = statement.targets if isinstance(statement, ast.Assign) else (
            [statement.target] if isinstance(statement, ast.AnnAssign) else [])
        names.update(t.id for t in targets if isinstance(t, ast.Name))
    return frozenset(names)


@lru_cache(maxsize=1)
def server_arg_dests() -> frozenset[str]:
    from sparkgate.sglang_cli import build_sglang_parser

    return frozenset(action.dest for action in build_sglang_parser(with_fork_options=False)._actions)


def text_in_scope(text: str, scope: str) -> bool:
    """Plain substring search in one file, or in every .py file of the package when scope is 'sglang'."""
    if scope == "sglang":
        return any(text in p.read_text(encoding="utf-8", errors="replace") for p in (site_root() / "sglang").rglob("*.py"))
    return text in source_path(scope).read_text(encoding="utf-8")


def entries(section: str) -> list[tuple[str, dict]]:
    return sorted(conformance.fixture()[section].items())


def ids(section: str) -> list[str]:
    return [key for key, _ in entries(section)]


# --- the fixture against SGLang's source -----------------------------------------------------------


def test_fixture_is_for_the_pinned_release():
    import sglang

    assert conformance.fixture()["sglang_version"] == conformance.SGLANG_VERSION == sglang.__version__
    assert set(conformance.fixture()) - {"sglang_version", "about"} == set(conformance.SECTIONS)


@pytest.mark.parametrize(("key", "item"), entries("log_formats"), ids=ids("log_formats"))
def test_log_format_exists(key, item):
    assert log_format_in_source(item["text"], item["source"]), (
        f"log_formats.{key}: {item['text']!r} is no format string in {item['source']}")


@pytest.mark.parametrize(("key", "item"), entries("strings"), ids=ids("strings"))
def test_string_exists(key, item):
    assert string_in_source(item["text"], item["source"]), f"strings.{key}: {item['text']!r} not in {item['source']}"


@pytest.mark.parametrize(("key", "item"), entries("metrics"), ids=ids("metrics"))
def test_metric_exists(key, item):
    assert string_in_source(item["text"], item["source"]), f"metrics.{key}: {item['text']!r} not in {item['source']}"


@pytest.mark.parametrize(("key", "item"), entries("classes"), ids=ids("classes"))
def test_class_defined(key, item):
    assert class_in_source(item["text"], item["source"]), f"classes.{key}: no class {item['text']} in {item['source']}"


@pytest.mark.parametrize(("key", "item"), entries("dtypes"), ids=ids("dtypes"))
def test_dtype_used(key, item):
    assert dtype_in_source(item["text"], item["source"]), f"dtypes.{key}: {item['text']} not used in {item['source']}"


@pytest.mark.parametrize(("key", "item"), entries("attributes"), ids=ids("attributes"))
def test_attribute_used(key, item):
    assert attribute_in_source(item["text"], item["source"]), f"attributes.{key}: .{item['text']} not in {item['source']}"


@pytest.mark.parametrize(("key", "item"), entries("env"), ids=ids("env"))
def test_env_declared(key, item):
    assert item["text"] in declared_envs(), f"env.{key}: {item['text']} is not declared in Envs (environ.py)"


@pytest.mark.parametrize(("key", "item"), entries("server_args"), ids=ids("server_args"))
def test_server_arg_is_a_field(key, item):
    assert item["text"] in server_arg_dests(), f"server_args.{key}: {item['text']} is no ServerArgs field"


@pytest.mark.parametrize(("key", "item"), entries("hook_targets"), ids=ids("hook_targets"))
def test_hook_target_resolves(key, item):
    assert pkgutil.resolve_name(item["text"]) is not None


@pytest.mark.parametrize(("key", "item"), entries("fork_only"), ids=ids("fork_only"))
def test_fork_only_is_absent_from_stock(key, item):
    assert not text_in_scope(item["text"], item["absent_from"]), (
        f"fork_only.{key}: {item['text']!r} exists in stock {item['absent_from']}: it is not fork-only")


# --- the search functions can fail ------------------------------------------------------------------


def test_misspelled_entries_are_not_found():
    assert log_format_in_source("Load weight end. elapsed={e:.2f} s", "sglang/srt/model_executor/model_runner.py")
    assert not log_format_in_source("Load weights end. elapsed={e:.2f} s", "sglang/srt/model_executor/model_runner.py")
    # A hole where SGLang has literal text (or the reverse) is a mismatch too.
    assert not log_format_in_source("Load weight end. elapsed={e:.2f} s, type=Bailing{x}",
                                    "sglang/srt/model_executor/model_runner.py")
    assert log_format_in_source("Using {gemm} gemm for humming moe", "sglang/srt/layers/moe/moe_runner/humming.py")
    assert not log_format_in_source("Using indexed gemm for humming moe", "sglang/srt/layers/moe/moe_runner/humming.py")
    metrics_file = "sglang/srt/observability/metrics_collector.py"
    assert not string_in_source("sglang:spec_verify_call_total", metrics_file)
    assert not class_in_source("Mxfp4HummingMoeMethod", "sglang/srt/layers/quantization/mxfp4_humming_moe.py")
    assert not dtype_in_source("torch.float8_e4m3", "sglang/srt/layers/quantization/fp8.py")
    assert "SGLANG_EXPOSE_OWN_ENV_VAR" not in declared_envs()
    assert "moe_runner_backends" not in server_arg_dests()
    with pytest.raises((ImportError, AttributeError)):
        pkgutil.resolve_name("sglang.srt.model_executor.model_runner.ModelRunner.load_models")


def test_absence_check_finds_what_stock_has():
    assert text_in_scope("class ParallelLMHead", "sglang/srt/layers/vocab_parallel_embedding.py")
    assert text_in_scope("set_lm_head_from_target", "sglang")  # other MTP drafts have it, Bailing's does not


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


CHECKER = ("sparkgate/optimizations", "sparkgate/evidence", "sparkgate/phases.py")


def test_checker_spells_no_sglang_string_itself():
    """The checker gets SGLang's strings from the fixture: none of them appears as a string literal in
    sparkgate/optimizations, sparkgate/evidence or sparkgate/phases.py (prose in hints may mention them)."""
    root = Path(__file__).resolve().parents[2]
    fixture = conformance.fixture()
    wanted = {e["text"] for section in ("log_formats", "metrics", "classes", "dtypes", "fork_only", "hook_targets")
              for e in fixture[section].values()}
    wanted |= {format_template(e["text"]).partition("{}")[0].strip() for e in fixture["log_formats"].values()} - {""}
    files = [p for entry in CHECKER for p in ((root / entry).glob("*.py") if (root / entry).is_dir() else [root / entry])]
    assert files
    spelled = {}
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in wanted:
                spelled.setdefault(path.name, set()).add(node.value)
    assert not spelled, spelled
