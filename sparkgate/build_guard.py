"""Build-time guard for the Spark engine image: fail the `docker build` unless the installed SGLang
carries the fork's patches and Humming imports.

The checks read SGLang's source with `ast` instead of importing the model modules, so they run on a
build host without a GPU and in CI against stock sglang==0.5.23 (where they must report the first two
as missing).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path

from sparkgate import fork
from sparkgate import sglang_flags as F


@dataclass(frozen=True)
class GuardResult:
    name: str
    ok: bool
    detail: str


def _module_source(module: str) -> tuple[Path | None, ast.Module | None]:
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        return None, None
    path = Path(spec.origin)
    return path, ast.parse(path.read_text(encoding="utf-8"))


def _class_node(tree: ast.Module, name: str) -> ast.ClassDef | None:
    return next((n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == name), None)


def check_env_declared(env_name: str = F.FP8_LM_HEAD_ENV) -> GuardResult:
    name = f"declares {env_name}"
    path, tree = _module_source("sglang.srt.environ")
    if tree is None:
        return GuardResult(name, False, "sglang.srt.environ not found: is SGLang installed?")
    envs = _class_node(tree, "Envs")
    if envs is None:
        return GuardResult(name, False, f"{path}: no class Envs")
    declared = {
        target.id
        for node in envs.body
        for target in (node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)])
        if isinstance(target, ast.Name)
    }
    if env_name in declared:
        return GuardResult(name, True, f"{path}: Envs.{env_name}")
    return GuardResult(name, False, f"{path}: Envs has no {env_name}; SGLang would ignore it silently (stock build?)")


def check_draft_module_sharing() -> GuardResult:
    draft_class = fork.FORK_MODULE_SHARING_DRAFT_CLASSES[0]
    name = f"{draft_class}.set_lm_head_from_target"
    path, tree = _module_source("sglang.srt.models.bailing_moe_nextn")
    if tree is None:
        return GuardResult(name, False, "sglang.srt.models.bailing_moe_nextn not found")
    node = _class_node(tree, draft_class)
    if node is None:
        return GuardResult(name, False, f"{path}: no class {draft_class}")
    methods = {n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    if "set_lm_head_from_target" in methods:
        return GuardResult(name, True, f"{path}: defined")
    return GuardResult(
        name, False, f"{path}: missing; the NEXTN draft would share only the LM-head tensor (accept length 1.00 with FP8 head)"
    )


def check_humming_imports() -> GuardResult:
    try:
        module = importlib.import_module("humming")
    except Exception as exc:  # any import failure means the kernels are unusable
        return GuardResult("import humming", False, f"{type(exc).__name__}: {exc} (install humming-kernels[cu13])")
    return GuardResult("import humming", True, getattr(module, "__file__", "") or "imported")


def run_all() -> list[GuardResult]:
    return [check_env_declared(), check_draft_module_sharing(), check_humming_imports()]
