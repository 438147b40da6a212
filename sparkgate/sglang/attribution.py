"""Which checks read each SGLang fact, derived from sparkgate's code with `ast`, never from a hand-written list.

A fact is a conformance-fixture entry (section, key), an SGLang option (`--flag`, with the ServerArgs field it
sets) or an environment variable. A check reads a fact when a value taken from it reaches the CheckResult the check
emits:

- inside a function, a value is followed through local variables, containers, conditions (an `if` on it reaches
  what is emitted inside), arguments and return values, to `checked`/`failed`/`CheckResult`, whose first argument
  names the check (a literal, an f-string, a local bound to literals, or a parameter the caller names);
- across functions and modules, each function is summarised once: where each parameter and each of its own reads
  go (a check, the check its caller names, its return value, an Evidence field), and every call uses the summary.
  Module constants carry what their value reads; `for module in REGISTRY` calls reach every optimization;
- through the Evidence object (evidence/gather.py): what gather stores in a field reaches every check that reads
  that field; through expectations.json: what an optimization's `expectations()` puts under a key reaches its
  checks that read the key; through a profile setting's default (a class attribute);
- through the engagement probe (probe/): a hooked SGLang target, and an SGLang attribute, import or class a hook
  reads, feed the report fields that hook writes (`REPORT.<method>`); the checks that read those fields read the
  fact. A target read only by the plugin's `register` feeds every field.

A `ctx.problem(...)` is a profile rule: rules are recorded by module. A call nothing resolves passes its arguments
through to its result.
"""

from __future__ import annotations

import ast
import fnmatch
import importlib
import importlib.util
import tomllib
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from sparkgate.sglang import conformance

# conformance accessor -> the fixture section its first argument names a key of.
ACCESSORS = {
    "log_format": "log_formats", "log_line": "log_formats", "log_pattern": "log_formats", "log_fields": "log_formats",
    "string_": "strings",
    "metric": "metrics", "class_name": "classes", "dtype": "dtypes", "env": "env", "server_arg": "server_args",
    "hook_target": "hook_targets", "fork_only": "fork_only",
}
CONFORMANCE = "sparkgate.sglang.conformance"
FLAGS = "sparkgate.sglang.flags"
RESULTS = "sparkgate.evidence.results"
EMITTERS = frozenset({("func", RESULTS, "checked"), ("func", RESULTS, "failed"), ("class", RESULTS, "CheckResult")})
# The evidence bus: gather stores a field, checks read it.
EVIDENCE = ("class", "sparkgate.evidence.gather", "Evidence")
PROBE_PACKAGE = "sparkgate_probe"
# Container methods that put an argument into the container.
MUTATORS = frozenset({"append", "extend", "add", "update", "insert", "setdefault", "appendleft"})
RET = ("ret",)
# This module, the fact tables and the accessor module itself read no fact of their own.
NOT_READERS = frozenset({"sparkgate.sglang.attribution", "sparkgate.sglang.facts", CONFORMANCE})

Source = tuple  # ("entry", section, key) | ("entrypat", section, pattern) | ("fork_kind", kind) | ("flag", option)
#                 | ("envvar", name) | ("probe_field", field) | ("ev", field) | ("expect", module, key) | ("clsattr", name)
Label = tuple  # ("check", name) | ("cparam", parameter) | RET | ("store", channel source) | ("rule", module path)
Ref = tuple  # ("module", name) | ("func", module, qualname) | ("class", module, name) | ("const", module, name)


@dataclass(frozen=True)
class Attribution:
    """Who reads one fact: the checks whose evidence it is and the modules whose profile rules read it."""

    checks: tuple[str, ...] = ()
    rules: tuple[str, ...] = ()


@dataclass(frozen=True)
class ProbeRead:
    """Something the probe reads off SGLang: a dotted target it hooks or imports (`module` empty), an imported name
    (`module`: where from), or an attribute name; and the report fields it feeds."""

    text: str
    module: str
    fields: frozenset[str]
    where: str = ""  # the probe module that reads it


@dataclass(frozen=True)
class Derived:
    """The code's side of the table, independent of any fixture: what each source reaches."""

    reaches: dict[Source, frozenset[Label]]  # checks and rules only, Evidence/expectations/default channels expanded
    probe: tuple[ProbeRead, ...]
    declared: frozenset[str]


# --- the index of modules --------------------------------------------------------------------------------------


@dataclass
class _Module:
    name: str
    label: str  # repo-relative path, as the report prints it
    tree: ast.Module
    package: bool
    defs: dict[str, ast.AST]  # top-level functions and classes
    consts: dict[str, ast.expr]  # top-level NAME = value
    imports: dict[str, tuple[str, str | None]]  # local name -> (module, attribute or None for the module itself)


def _imports(statements: Iterable[ast.stmt], module: str, package: bool) -> dict[str, tuple[str, str | None]]:
    found: dict[str, tuple[str, str | None]] = {}
    for node in statements:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    found[alias.asname] = (alias.name, None)
                else:
                    top = alias.name.split(".")[0]
                    found[top] = (top, None)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".")
                parts = parts[: len(parts) - node.level + (1 if package else 0)]
                base = ".".join(parts + ([node.module] if node.module else []))
            for alias in node.names:
                found[alias.asname or alias.name] = (base, alias.name)
    return found


def _top_statements(tree: ast.Module) -> Iterator[ast.stmt]:
    """Module-level statements, including those under `if TYPE_CHECKING:` and `try:`."""
    for node in tree.body:
        yield node
        if isinstance(node, ast.If | ast.Try):
            for block in (node.body, node.orelse, getattr(node, "finalbody", []),
                          *[h.body for h in getattr(node, "handlers", [])]):
                yield from block


def _module(path: Path, name: str, label: str) -> _Module:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = path.name == "__init__.py"
    defs: dict[str, ast.AST] = {}
    consts: dict[str, ast.expr] = {}
    for node in _top_statements(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            defs[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    consts[target.id] = node.value
                elif isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple) \
                        and len(target.elts) == len(node.value.elts):  # A, B = x, y
                    consts.update({t.id: v for t, v in zip(target.elts, node.value.elts, strict=True)
                                   if isinstance(t, ast.Name)})
        elif isinstance(node, ast.AnnAssign) and node.value is not None and isinstance(node.target, ast.Name):
            consts[node.target.id] = node.value
    return _Module(name, label, tree, package, defs, consts, _imports(_top_statements(tree), name, package))


def _tree_modules(base: Path, package: str, label: str) -> Iterator[_Module]:
    for path in sorted(base.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        parts = list(path.relative_to(base).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        yield _module(path, ".".join([package, *parts]), f"{label}/{path.relative_to(base)}")


def product_root() -> Path:
    return Path(__file__).resolve().parents[1]


def probe_root() -> Path | None:
    """The probe's package: the checkout's probe/src/sparkgate_probe, else an installed one."""
    checkout = product_root().parent / "probe" / "src" / PROBE_PACKAGE
    if checkout.is_dir():
        return checkout
    spec = importlib.util.find_spec(PROBE_PACKAGE)
    if spec is not None and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    return None


# --- one function, as the analysis sees it -------------------------------------------------------------------


def _args(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> list[ast.arg]:
    a = node.args
    return [*a.posonlyargs, *a.args, *([a.vararg] if a.vararg else []), *a.kwonlyargs, *([a.kwarg] if a.kwarg else [])]


class _Function:
    def __init__(self, module: _Module, qualname: str, node: ast.FunctionDef | ast.AsyncFunctionDef,
                 cls: str | None):
        self.module, self.qualname, self.node, self.cls = module, qualname, node, cls
        self.params = [a.arg for a in _args(node)]
        self.parents: dict[ast.AST, ast.AST] = {}
        self.nodes: list[ast.AST] = []  # the body and the parameter defaults, never decorators or annotations
        roots = [*node.body, *node.args.defaults, *[d for d in node.args.kw_defaults if d is not None]]
        for root in roots:
            self.parents[root] = node
            for parent in ast.walk(root):
                self.nodes.append(parent)
                for child in ast.iter_child_nodes(parent):
                    self.parents[child] = parent
        self.locals: set[str] = set(self.params)
        self.loads: dict[str, list[ast.Name]] = defaultdict(list)
        self.bindings: dict[str, list[ast.expr]] = defaultdict(list)  # what flows into a local name
        self.local_imports = _imports((n for n in self.nodes if isinstance(n, ast.Import | ast.ImportFrom)),
                                      module.name, module.package)
        self.locals |= set(self.local_imports)
        for n in self.nodes:
            if isinstance(n, ast.Name):
                if isinstance(n.ctx, ast.Load):
                    self.loads[n.id].append(n)
                else:
                    self.locals.add(n.id)
            elif isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                self.locals.add(n.name)
                if not isinstance(n, ast.ClassDef):
                    self.locals |= {a.arg for a in _args(n)}
            elif isinstance(n, ast.Lambda):
                self.locals |= {a.arg for a in _args(n)}
            elif isinstance(n, ast.ExceptHandler) and n.name:
                self.locals.add(n.name)
            if isinstance(n, ast.Assign):
                for target in n.targets:
                    for name in _target_names(target):
                        self.bindings[name].append(n.value)
            elif isinstance(n, ast.AugAssign | ast.AnnAssign | ast.NamedExpr) and n.value is not None:
                for name in _target_names(n.target):
                    self.bindings[name].append(n.value)
            elif isinstance(n, ast.For | ast.AsyncFor | ast.comprehension):
                for name in _target_names(n.target):
                    self.bindings[name].append(n.iter)
            elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in MUTATORS:
                root = _root_name(n.func.value)
                if root:
                    self.bindings[root].extend([*n.args, *[k.value for k in n.keywords]])
        self.sink_memo: dict[int, frozenset[Label]] = {}
        self.var_memo: dict[str, frozenset[Label]] = {}
        self.active: set[int] = set()
        self.active_vars: set[str] = set()


def _target_names(target: ast.AST) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, ast.Tuple | ast.List):
        return [name for element in target.elts for name in _target_names(element)]
    if isinstance(target, ast.Starred):
        return _target_names(target.value)
    return []


def _root_name(node: ast.AST) -> str | None:
    while isinstance(node, ast.Attribute | ast.Subscript):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


# --- the analysis ----------------------------------------------------------------------------------------------


@dataclass
class _Summary:
    direct: dict[Source, set[Label]]  # each read of the function's own (or returned to it by a call) -> where it goes
    params: dict[str, frozenset[Label]]

    def returns(self) -> set[Source]:
        return {s for s, labels in self.direct.items() if RET in labels}


_EMPTY = _Summary({}, {})


class _Analysis:
    def __init__(self, modules: Iterable[_Module], declared: Iterable[str]):
        self.modules = {m.name: m for m in modules}
        self.declared = frozenset(declared)
        self.summaries: dict[Ref, _Summary] = {}
        self.active: set[Ref] = set()
        self.functions: dict[Ref, _Function] = {}
        self.const_memo: dict[Ref, frozenset[Source]] = {}
        self.const_active: set[Ref] = set()
        self.evidence_fields = self._class_fields(EVIDENCE)
        self.class_defaults: dict[str, set[Source]] = defaultdict(set)
        self.probe_fields: frozenset[str] = frozenset()
        self.publish_key = ""

    def read_class_defaults(self) -> None:
        """A class attribute whose default reads a fact (a profile setting defaulting to an SGLang class name)."""
        for module in self.modules.values():
            if module.name.split(".")[0] != "sparkgate" or module.name in NOT_READERS:
                continue
            for node in module.defs.values():
                if not isinstance(node, ast.ClassDef) or ("class", module.name, node.name) == EVIDENCE:
                    continue
                for item in node.body:
                    if isinstance(item, ast.AnnAssign) and item.value is not None:
                        names = _target_names(item.target)
                    elif isinstance(item, ast.Assign):
                        names = [n for t in item.targets for n in _target_names(t)]
                    else:
                        continue
                    reads = self.expression_sources(item.value, module)
                    for name in names if reads else ():
                        self.class_defaults[name] |= reads

    # --- names ---

    def lookup(self, module: str, attr: str, depth: int = 0) -> Ref | None:
        found = self.modules.get(module)
        if found is not None:
            node = found.defs.get(attr)
            if node is not None:
                return ("class" if isinstance(node, ast.ClassDef) else "func", module, attr)
            if attr in found.consts:
                return ("const", module, attr)
            if attr in found.imports and depth < 12:
                return self.import_ref(found.imports[attr], depth + 1)
        if f"{module}.{attr}" in self.modules:
            return ("module", f"{module}.{attr}")
        return None

    def import_ref(self, imported: tuple[str, str | None], depth: int = 0) -> Ref | None:
        module, attr = imported
        if attr is None:
            return ("module", module)
        return self.lookup(module, attr, depth) or ("extern", module, attr)

    def global_ref(self, name: str, module: _Module, fn: _Function | None = None) -> Ref | None:
        if fn is not None and name in fn.local_imports:
            return self.import_ref(fn.local_imports[name])
        if name in module.defs or name in module.consts:
            return self.lookup(module.name, name)
        if name in module.imports:
            return self.import_ref(module.imports[name])
        return None

    def ref_of(self, node: ast.AST, module: _Module, fn: _Function | None) -> Ref | None:
        """What a name or dotted name refers to, when it is not a local variable."""
        if isinstance(node, ast.Name):
            if fn is not None and node.id in fn.locals and node.id not in fn.local_imports:
                return None
            return self.global_ref(node.id, module, fn)
        if isinstance(node, ast.Attribute):
            base = self.ref_of(node.value, module, fn)
            if base is not None and base[0] == "module":
                return self.lookup(base[1], node.attr)
            if base is not None and base[0] == "class":
                return self.method(base, node.attr)
        return None

    def class_node(self, ref: Ref) -> ast.ClassDef | None:
        module = self.modules.get(ref[1])
        node = module.defs.get(ref[2]) if module else None
        return node if isinstance(node, ast.ClassDef) else None

    def method(self, cls: Ref, name: str) -> Ref | None:
        node = self.class_node(cls)
        if node is None:
            return None
        for item in node.body:
            if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and item.name == name:
                return ("func", cls[1], f"{cls[2]}.{name}")
        return None

    def _class_fields(self, cls: Ref) -> frozenset[str]:
        node = self.class_node(cls)
        if node is None:
            return frozenset()
        return frozenset(i.target.id for i in node.body if isinstance(i, ast.AnnAssign) and isinstance(i.target, ast.Name))

    def type_of(self, node: ast.AST, fn: _Function) -> Ref | None:
        """The class of a name: `self`, an annotated parameter, a local or module constant built by a constructor."""
        if not isinstance(node, ast.Name):
            return None
        name = node.id
        if name in fn.locals:
            if name == "self" and fn.cls:
                return ("class", fn.module.name, fn.cls)
            for arg in _args(fn.node):
                if arg.arg == name and arg.annotation is not None:
                    for part in ast.walk(arg.annotation):
                        ref = self.ref_of(part, fn.module, None) if isinstance(part, ast.Name | ast.Attribute) else None
                        if ref is not None and ref[0] == "class":
                            return ref
            for bound in fn.bindings.get(name, []):
                if isinstance(bound, ast.Call):
                    ref = self.ref_of(bound.func, fn.module, fn)
                    if ref is not None and ref[0] == "class":
                        return ref
            return None
        ref = self.global_ref(name, fn.module, fn)
        if ref is not None and ref[0] == "const":
            value = self.modules[ref[1]].consts[ref[2]]
            if isinstance(value, ast.Call):
                made = self.ref_of(value.func, self.modules[ref[1]], None)
                if made is not None and made[0] == "class":
                    return made
        return None

    def function(self, ref: Ref) -> _Function | None:
        if ref in self.functions:
            return self.functions[ref]
        module = self.modules.get(ref[1])
        if module is None or ref[1] in NOT_READERS:
            return None
        head, _, tail = ref[2].partition(".")
        node = module.defs.get(head)
        cls = None
        if tail and isinstance(node, ast.ClassDef):
            cls = head
            node = next((i for i in node.body if isinstance(i, ast.FunctionDef | ast.AsyncFunctionDef)
                         and i.name == tail), None)
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            return None
        self.functions[ref] = _Function(module, ref[2], node, cls)
        return self.functions[ref]

    def registry_modules(self, name: str, fn: _Function) -> list[str]:
        """The modules a loop variable runs over: `for key, module in REGISTRY.items()`."""
        found = []
        for bound in fn.bindings.get(name, []):
            for part in ast.walk(bound):
                ref = self.ref_of(part, fn.module, fn) if isinstance(part, ast.Name | ast.Attribute) else None
                if ref is not None and ref[0] == "const":
                    value = self.modules[ref[1]].consts[ref[2]]
                    elements = value.values if isinstance(value, ast.Dict) else getattr(value, "elts", [])
                    for element in elements:
                        target = self.ref_of(element, self.modules[ref[1]], None)
                        if target is not None and target[0] == "module":
                            found.append(target[1])
        return found

    def callees(self, call: ast.Call, fn: _Function) -> list[Ref]:
        func = call.func
        ref = self.ref_of(func, fn.module, fn)
        if ref is not None:
            return [ref]
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            cls = self.type_of(func.value, fn)
            if cls is not None:
                method = self.method(cls, func.attr)
                return [method] if method else []
            if func.value.id in fn.locals:
                return [r for m in self.registry_modules(func.value.id, fn) if (r := self.lookup(m, func.attr))]
        return []

    # --- what a node reads ---

    def accessor(self, call: ast.Call, fn_or_module: _Function | _Module) -> set[Source] | None:
        module = fn_or_module.module if isinstance(fn_or_module, _Function) else fn_or_module
        fn = fn_or_module if isinstance(fn_or_module, _Function) else None
        ref = self.ref_of(call.func, module, fn)
        if ref is None or ref[0] != "func" or ref[1] != CONFORMANCE:
            return None
        name = ref[2]
        keys = [self.keys(arg, fn) for arg in call.args]
        if name in ACCESSORS and keys and keys[0]:
            return {_entry(ACCESSORS[name], key) for key in keys[0]}
        if name in ("text", "entry") and len(keys) >= 2 and keys[0] and keys[1]:
            return {_entry(section, key) for section in keys[0] for key in keys[1]}
        if name == "fork_only_of_kind" and keys and keys[0]:
            return {("fork_kind", kind) for kind in keys[0]}
        return set()

    def keys(self, node: ast.expr, fn: _Function | None) -> list[str]:
        """A key argument's values: a literal, an f-string over a loop of literals (each value), else a pattern."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        if not isinstance(node, ast.JoinedStr):
            return []
        options: list[list[str]] = []
        for part in node.values:
            if isinstance(part, ast.Constant):
                options.append([str(part.value)])
                continue
            values = None
            if fn is not None and isinstance(part, ast.FormattedValue) and isinstance(part.value, ast.Name):
                bound = fn.bindings.get(part.value.id, [])
                if len(bound) == 1 and isinstance(bound[0], ast.Tuple | ast.List) and all(
                        isinstance(e, ast.Constant) and isinstance(e.value, str) for e in bound[0].elts):
                    values = [e.value for e in bound[0].elts]
            options.append(values or ["*"])
        keys = [""]
        for choice in options:
            keys = [k + c for k in keys for c in choice]
        return keys

    def expression_sources(self, expr: ast.AST, module: _Module) -> set[Source]:
        """Everything a module-level expression (a constant's value, a class attribute's default) reads."""
        found: set[Source] = set()
        for node in ast.walk(expr):
            if isinstance(node, ast.Call):
                accessed = self.accessor(node, module)
                if accessed is not None:
                    found |= accessed
                    continue
                ref = self.ref_of(node.func, module, None)
                if ref is not None and ref[0] == "func":
                    found |= self.summary(ref).returns()
            elif isinstance(node, ast.Name | ast.Attribute) and isinstance(node.ctx, ast.Load):
                ref = self.ref_of(node, module, None)
                if ref is not None and ref[0] == "const":
                    found |= self.const_sources(ref)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("--"):
                found.add(("flag", node.value))
        return found

    def const_sources(self, ref: Ref) -> frozenset[Source]:
        if ref in self.const_memo:
            return self.const_memo[ref]
        if ref in self.const_active or ref[1] in NOT_READERS - {CONFORMANCE}:
            return frozenset()
        self.const_active.add(ref)
        module = self.modules[ref[1]]
        value = module.consts[ref[2]]
        found = self.expression_sources(value, module)
        if ref[1] == FLAGS:
            found |= _flags_module_sources(ref[2], value)
        self.const_active.discard(ref)
        self.const_memo[ref] = frozenset(found)
        return self.const_memo[ref]

    def reads_report(self, fn: _Function) -> bool:
        """A function that handles the probe's report: its field names are the literals it reads."""
        return "report" in fn.params or any(
            isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "engagement"
            for n in fn.nodes)

    def expectations_view(self, name: str, fn: _Function) -> bool:
        """A name holding an optimization's expectations: `want = ev.expectations[...][KEY]`, or a `want` parameter."""
        if name == "want":
            return True
        return any(isinstance(n, ast.Attribute) and n.attr in ("expectations", "want")
                   for bound in fn.bindings.get(name, []) for n in ast.walk(bound))

    def sources(self, node: ast.AST, fn: _Function) -> set[Source]:
        if isinstance(node, ast.Call):
            accessed = self.accessor(node, fn)
            if accessed is not None:
                return accessed
            found: set[Source] = set()
            for ref in self.callees(node, fn):
                if ref[0] == "func":
                    found |= self.summary(ref).returns()
            func = node.func
            # want.get("key")
            if isinstance(func, ast.Attribute) and func.attr == "get" and isinstance(func.value, ast.Name) \
                    and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str) \
                    and self.expectations_view(func.value.id, fn):
                found.add(("expect", fn.module.name, node.args[0].value))
            return found
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and isinstance(node.value, ast.Name) \
                and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str) \
                and self.expectations_view(node.value.id, fn):
            return {("expect", fn.module.name, node.slice.value)}
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            ref = self.ref_of(node, fn.module, fn)
            return set(self.const_sources(ref)) if ref is not None and ref[0] == "const" else set()
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            parent = fn.parents.get(node)
            if isinstance(parent, ast.Call) and parent.func is node:
                return set()  # a method call: read at the call
            ref = self.ref_of(node, fn.module, fn)
            if ref is not None:
                return set(self.const_sources(ref)) if ref[0] == "const" else set()
            if isinstance(node.value, ast.Name):
                cls = self.type_of(node.value, fn)
                if cls == EVIDENCE and node.attr in self.evidence_fields:
                    return {("ev", node.attr)}
                if cls is not None:
                    method = self.method(cls, node.attr)  # a property
                    return self.summary(method).returns() if method else set()
            return {("clsattr", node.attr)} if node.attr in self.class_defaults else set()
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value.startswith("--"):
                return {("flag", node.value)}
            if node.value in self.probe_fields and (self.reads_report(fn) or node.value == self.publish_key):
                return {("probe_field", node.value)}
        return set()

    # --- where a value goes ---

    def summary(self, ref: Ref | None) -> _Summary:
        if ref is None:
            return _EMPTY
        if ref in self.summaries:
            return self.summaries[ref]
        fn = self.function(ref)
        if fn is None or ref in self.active:
            return _EMPTY
        self.active.add(ref)
        direct: dict[Source, set[Label]] = defaultdict(set)
        defaults = _defaults(fn.node)
        for node in fn.nodes:
            found = self.sources(node, fn)
            if found:
                labels = self.var_sinks(defaults[node], fn) if node in defaults else self.sinks(node, fn)
                for source in found:
                    direct[source] |= labels
            if isinstance(node, ast.Call) and not self.emits(node, fn):
                # A callee's reads whose check its caller names: resolved by this call's arguments.
                for callee in self.callees(node, fn):
                    for source, labels in self.summary(callee).direct.items():
                        for label in labels:
                            if label[0] == "cparam":
                                direct[source] |= self.names_at(node, callee, label[1], fn)
        summary = _Summary(dict(direct), {p: self.var_sinks(p, fn) for p in fn.params})
        self.active.discard(ref)
        self.summaries[ref] = summary
        return summary

    def emits(self, call: ast.Call, fn: _Function) -> bool:
        return any(ref in EMITTERS for ref in self.callees(call, fn))

    def sinks(self, node: ast.AST, fn: _Function) -> frozenset[Label]:
        key = id(node)
        if key in fn.sink_memo:
            return fn.sink_memo[key]
        if key in fn.active:
            return frozenset()
        fn.active.add(key)
        result = frozenset(self._sinks(node, fn))
        fn.active.discard(key)
        fn.sink_memo[key] = result
        return result

    def var_sinks(self, name: str, fn: _Function) -> frozenset[Label]:
        if name in fn.var_memo:
            return fn.var_memo[name]
        if name in fn.active_vars:
            return frozenset()
        fn.active_vars.add(name)
        result = frozenset(label for load in fn.loads.get(name, []) for label in self.sinks(load, fn))
        fn.active_vars.discard(name)
        fn.var_memo[name] = result
        return result

    def _sinks(self, node: ast.AST, fn: _Function) -> set[Label]:
        parent = fn.parents.get(node)
        if parent is None or parent is fn.node:
            return set()
        if isinstance(parent, ast.Call):
            return set(self.sinks(parent, fn)) if node is parent.func else self.argument_sinks(parent, node, fn)
        if isinstance(parent, ast.keyword):
            return self.argument_sinks(fn.parents[parent], parent, fn)
        if isinstance(parent, ast.Assign | ast.AnnAssign | ast.AugAssign):
            if node is not parent.value:
                return set()
            targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
            return {label for target in targets for label in self.target_sinks(target, fn)}
        if isinstance(parent, ast.NamedExpr):
            return self.target_sinks(parent.target, fn) | set(self.sinks(parent, fn))
        if isinstance(parent, ast.For | ast.AsyncFor):
            return self.target_sinks(parent.target, fn) if node is parent.iter else set()
        if isinstance(parent, ast.comprehension):
            return set(self.sinks(fn.parents[parent], fn))
        if isinstance(parent, ast.withitem):  # with open_(value) as name
            return self.target_sinks(parent.optional_vars, fn) if parent.optional_vars is not None else set()
        if isinstance(parent, ast.Return | ast.Yield | ast.YieldFrom):
            return {RET}
        if isinstance(parent, ast.If | ast.While):
            return self.inside(parent.body + parent.orelse, fn) if node is parent.test else set()
        if isinstance(parent, ast.Tuple | ast.List | ast.Set):
            named = {("check", c) for e in parent.elts for c in self.literal_checks(e)}
            return named or set(self.sinks(parent, fn))
        if isinstance(parent, ast.Dict) and fn.qualname == "expectations" and node in parent.values:
            stored = self.expectations_store(parent, parent.keys[parent.values.index(node)], fn)
            if stored:
                return stored
        if isinstance(parent, ast.stmt):
            return set()  # an expression statement's value, an assert, a raise: it reaches nothing
        return set(self.sinks(parent, fn))

    def expectations_store(self, dict_node: ast.Dict, key: ast.expr | None, fn: _Function) -> set[Label]:
        """`return {"key": value, ...}` in an optimization's expectations(): the key its checks read back."""
        outer = fn.parents.get(dict_node)
        while isinstance(outer, ast.Dict) and dict_node in outer.values:
            key, dict_node = outer.keys[outer.values.index(dict_node)], outer
            outer = fn.parents.get(dict_node)
        if isinstance(outer, ast.Return) and isinstance(key, ast.Constant) and isinstance(key.value, str):
            return {("store", ("expect", fn.module.name, key.value))}
        return set()

    def target_sinks(self, target: ast.AST, fn: _Function) -> set[Label]:
        if isinstance(target, ast.Name):
            return set(self.var_sinks(target.id, fn))
        if isinstance(target, ast.Tuple | ast.List):
            return {label for element in target.elts for label in self.target_sinks(element, fn)}
        if isinstance(target, ast.Starred):
            return self.target_sinks(target.value, fn)
        if isinstance(target, ast.Attribute | ast.Subscript):
            base = target.value if isinstance(target, ast.Attribute) else target
            holder = base.value if isinstance(base, ast.Subscript) else base
            if isinstance(target, ast.Attribute) and self.type_of(target.value, fn) == EVIDENCE:
                return {("store", ("ev", target.attr))}
            if isinstance(holder, ast.Attribute) and self.type_of(holder.value, fn) == EVIDENCE:
                return {("store", ("ev", holder.attr))}
            root = _root_name(target)
            if root and root in fn.locals and root != "self":
                return set(self.var_sinks(root, fn))
        return set()

    def argument_sinks(self, call: ast.Call, argument: ast.AST, fn: _Function) -> set[Label]:
        keyword = argument.arg if isinstance(argument, ast.keyword) else None
        if self.emits(call, fn):
            first = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "name"), None)
            return self.check_names(first, fn)
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr == "problem":
            return {("rule", fn.module.label)}
        callees = self.callees(call, fn)
        if isinstance(func, ast.Attribute) and func.attr in MUTATORS and not callees:
            return self.target_sinks(func.value, fn)
        functions = [r for r in callees if r[0] == "func" and r[1] != CONFORMANCE and self.function(r) is not None]
        if functions:
            found: set[Label] = set()
            for ref in functions:
                target = self.function(ref)
                name = _parameter(target, call, argument, keyword)
                summary = self.summary(ref)
                labels = summary.params.get(name, frozenset()) if name else frozenset(
                    label for labels in summary.params.values() for label in labels)
                for label in labels:
                    if label == RET:
                        found |= self.sinks(call, fn)
                    elif label[0] == "cparam":
                        found |= self.names_at(call, ref, label[1], fn)
                    elif label[0] == "check":
                        found.add(label)
                    # A store or a rule reached through a parameter is the caller's whole object (a profile, a launch
                    # plan) going into an Evidence field or a profile rule: channels and rules count only what a
                    # function reads itself or gets back from a call.
            return found
        if EVIDENCE in callees:
            return {("store", ("ev", keyword))} if keyword else set()
        return set(self.sinks(call, fn))  # unresolved: the value passes into the call's result

    def names_at(self, call: ast.Call, callee: Ref, parameter: str, fn: _Function) -> set[Label]:
        """The check a call names through the callee's `parameter`."""
        target = self.function(callee)
        if target is None:
            return set()
        argument = _argument(target, call, parameter)
        if argument is None:
            return set()
        return self.check_names(argument, fn)

    def check_names(self, node: ast.expr | None, fn: _Function) -> set[Label]:
        if node is None:
            return set()
        if isinstance(node, ast.Name) and node.id in fn.params:
            return {("cparam", node.id)}
        named = self.literal_checks(node, fn)
        if not named:  # a name built some other way: every check the function names
            named = {c for n in fn.nodes for c in self.literal_checks(n)}
        return {("check", c) for c in named}

    def literal_checks(self, node: ast.AST, fn: _Function | None = None, seen: set[str] | None = None) -> set[str]:
        """Declared check names in a literal or f-string, following local names (with `fn`) and module constants."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return {node.value} if node.value in self.declared else set()
        if isinstance(node, ast.JoinedStr):
            pattern = "".join(v.value if isinstance(v, ast.Constant) else "*" for v in node.values)
            return {c for c in self.declared if fnmatch.fnmatchcase(c, pattern)} if pattern != "*" else set()
        if fn is None:
            return set()
        found: set[str] = set()
        seen = set() if seen is None else seen
        for part in ast.walk(node):
            if isinstance(part, ast.Constant | ast.JoinedStr):
                found |= self.literal_checks(part)
            elif isinstance(part, ast.Name) and part.id not in seen:
                seen.add(part.id)
                if part.id in fn.locals:
                    for bound in fn.bindings.get(part.id, []):
                        found |= self.literal_checks(bound, fn, seen)
                else:
                    ref = self.ref_of(part, fn.module, fn)
                    if ref is not None and ref[0] == "const":
                        value = self.modules[ref[1]].consts[ref[2]]
                        found |= {c for n in ast.walk(value) for c in self.literal_checks(n)}
        return found

    def inside(self, statements: list[ast.stmt], fn: _Function) -> set[Label]:
        """Where a condition's value goes: what the statements it guards emit, store, return or assign."""
        found: set[Label] = set()
        for statement in statements:
            for node in ast.walk(statement):
                if isinstance(node, ast.Call):
                    if self.emits(node, fn):
                        first = node.args[0] if node.args else None
                        found |= self.check_names(first, fn)
                    elif isinstance(node.func, ast.Attribute) and node.func.attr == "problem":
                        found.add(("rule", fn.module.label))
                    elif isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS:
                        found |= self.target_sinks(node.func.value, fn)
                    else:
                        for ref in self.callees(node, fn):
                            summary = self.summary(ref)
                            for labels in [*summary.direct.values(), *summary.params.values()]:
                                for label in labels:
                                    if label[0] == "cparam":
                                        found |= self.names_at(node, ref, label[1], fn)
                                    elif label[0] == "check":
                                        found.add(label)
                elif isinstance(node, ast.Return) and node.value is not None:
                    found.add(RET)
                elif isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
                    for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                        found |= self.target_sinks(target, fn)
        return found

    # --- everything ---

    def all_functions(self, prefix: str) -> Iterator[Ref]:
        for module in self.modules.values():
            if not (module.name == prefix or module.name.startswith(prefix + ".")) or module.name in NOT_READERS:
                continue
            for name, node in module.defs.items():
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    yield ("func", module.name, name)
                elif isinstance(node, ast.ClassDef):
                    for item in node.body:
                        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                            yield ("func", module.name, f"{name}.{item.name}")

    def renames(self) -> dict[str, set[str]]:
        """Checks re-emitted under another name (`dataclasses.replace(c, name=RECHECK_NAMES.get(...))`), read from the
        module's mapping at run time."""
        found: dict[str, set[str]] = defaultdict(set)
        for ref in self.all_functions("sparkgate"):
            fn = self.function(ref)
            for node in fn.nodes if fn else []:
                if not isinstance(node, ast.keyword) or node.arg != "name":
                    continue
                for part in ast.walk(node.value):
                    const = self.ref_of(part, fn.module, fn) if isinstance(part, ast.Name) else None
                    if const is None or const[0] != "const":
                        continue
                    try:
                        mapping = getattr(importlib.import_module(const[1]), const[2], None)
                    except ImportError:
                        continue
                    if isinstance(mapping, dict) and all(
                            k in self.declared and v in self.declared for k, v in mapping.items()):
                        for old, new in mapping.items():
                            found[old].add(new)
        return found


def _flags_module_sources(name: str, value: ast.expr) -> set[Source]:
    """sglang/flags.py spells the variables sparkgate sets (`NAME_ENV = "SGLANG_..."`) and keys its tables of
    variables and prefixes a profile may or may not set by name (`{"SGLANG_LOG_MS": why}`, `{"SGLANG_DSPARK_": why}`)."""
    if isinstance(value, ast.Constant) and isinstance(value.value, str):
        return {("envvar", value.value)} if name.endswith("_ENV") else set()
    found: set[Source] = set()
    for key in value.keys if isinstance(value, ast.Dict) else []:
        if isinstance(key, ast.Constant) and isinstance(key.value, str) and key.value[:1].isupper():
            found.add(("envvar", key.value + "*") if key.value.endswith("_") else ("envvar", key.value))
    return found


def _defaults(node: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[ast.AST, str]:
    """Each parameter default's node -> its parameter (a default flows into the parameter)."""
    a = node.args
    positional = [*a.posonlyargs, *a.args]
    found = {d: p.arg for d, p in zip(a.defaults, positional[len(positional) - len(a.defaults):], strict=True)}
    found.update({d: p.arg for d, p in zip(a.kw_defaults, a.kwonlyargs, strict=True) if d is not None})
    return found


def _bound(fn: _Function, call: ast.Call) -> int:
    """Parameters a call binds implicitly: `self` for a method called on an instance."""
    if fn.cls is None or not fn.params or fn.params[0] not in ("self", "cls"):
        return 0
    return 1


def _parameter(fn: _Function, call: ast.Call, argument: ast.AST, keyword: str | None) -> str | None:
    a = fn.node.args
    positional = [p.arg for p in [*a.posonlyargs, *a.args]][_bound(fn, call):]
    if isinstance(argument, ast.keyword):
        if keyword is None:
            return None  # **kwargs: every parameter
        if keyword in fn.params:
            return keyword
        return a.kwarg.arg if a.kwarg else None
    if isinstance(argument, ast.Starred):
        return None
    index = call.args.index(argument)
    if index < len(positional):
        return positional[index]
    return a.vararg.arg if a.vararg else None


def _argument(fn: _Function, call: ast.Call, parameter: str) -> ast.expr | None:
    for k in call.keywords:
        if k.arg == parameter:
            return k.value
    a = fn.node.args
    positional = [p.arg for p in [*a.posonlyargs, *a.args]][_bound(fn, call):]
    if parameter in positional and positional.index(parameter) < len(call.args):
        argument = call.args[positional.index(parameter)]
        return None if isinstance(argument, ast.Starred) else argument
    return None


def _entry(section: str, key: str) -> Source:
    return ("entrypat", section, key) if "*" in key else ("entry", section, key)


# --- the probe -------------------------------------------------------------------------------------------------


def _probe(analysis: _Analysis) -> tuple[tuple[ProbeRead, ...], frozenset[str], str]:
    """What the probe reads off SGLang and the report fields each read feeds; the report's fields (with the key it
    is published under); that key."""
    modules = {n: m for n, m in analysis.modules.items() if n.split(".")[0] == PROBE_PACKAGE}
    functions = {ref: analysis.function(ref) for ref in analysis.all_functions(PROBE_PACKAGE)}
    functions = {ref: fn for ref, fn in functions.items() if fn is not None}
    if not functions:
        return (), frozenset(), ""
    # The publication: `state[KEY] = REPORT.snapshot(...)`; the snapshot method builds the report's dict, each
    # field showing some of the report's attributes (self._x), which the other methods write.
    publish, snapshot = "", None
    for fn in functions.values():
        for node in fn.nodes:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                for target in node.targets:
                    if isinstance(target, ast.Subscript) and isinstance(target.slice, ast.Constant):
                        made = [c for c in analysis.callees(node.value, fn) if c in functions and "." in c[2]]
                        if made:
                            publish, snapshot = target.slice.value, made[0]
    fields: dict[str, set[str]] = {}
    if snapshot is not None:
        for node in functions[snapshot].nodes:
            if isinstance(node, ast.Dict):
                for key, value in zip(node.keys, node.values, strict=True):
                    if isinstance(key, ast.Constant) and isinstance(key.value, str):
                        fields[key.value] = {n.attr for n in ast.walk(value) if isinstance(n, ast.Attribute)}
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Subscript) and isinstance(target.slice, ast.Constant):
                        fields[target.slice.value] = {n.attr for n in ast.walk(node.value)
                                                      if isinstance(n, ast.Attribute)}

    def method_fields(ref: Ref) -> set[str]:
        if ref == snapshot:
            return {*fields, publish}
        written = set()
        for node in functions[ref].nodes:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                node, ast.AugAssign) else []
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS:
                targets = [node.func.value]
            for target in targets:
                written |= {t.attr for t in ast.walk(target) if isinstance(t, ast.Attribute)
                            and isinstance(t.value, ast.Name) and t.value.id == "self"}
        return {name for name, shown in fields.items() if shown & written}

    # The call graph (a decorator is a call too). A function writes the fields of the report methods it calls.
    edges: dict[Ref, set[Ref]] = defaultdict(set)
    writes: dict[Ref, set[str]] = defaultdict(set)
    tables: dict[Ref, set[Ref]] = defaultdict(set)  # the module constants each function names
    for ref, fn in functions.items():
        for node in [*fn.nodes, *[d for deco in fn.node.decorator_list for d in ast.walk(deco)]]:
            if isinstance(node, ast.Call):
                for callee in analysis.callees(node, fn):
                    if callee in functions:
                        edges[ref].add(callee)
                        if "." in callee[2] and callee[2].split(".")[0] != ref[2].split(".")[0]:
                            writes[ref] |= method_fields(callee)
            elif isinstance(node, ast.Name | ast.Attribute) and isinstance(node.ctx, ast.Load):
                target = analysis.ref_of(node, fn.module, fn)
                if target in functions:
                    edges[ref].add(target)
                elif target is not None and target[0] == "const":
                    tables[ref].add(target)

    def reach(start: Ref) -> set[Ref]:
        seen, todo = {start}, [start]
        while todo:
            for nxt in edges.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    def fed(start: Ref) -> frozenset[str]:
        return frozenset(f for r in reach(start) for f in writes.get(r, ()))

    # The hooks: a module dict of SGLang target -> hook function (HOOK_TARGETS); the plugin's entry point (pyproject)
    # registers them all, so what only it reads feeds every field.
    hooks: dict[str, Ref] = {}
    hook_tables: set[Ref] = set()
    for module in modules.values():
        for const, value in module.consts.items():
            if not isinstance(value, ast.Dict):
                continue
            for key, hook in zip(value.keys, value.values, strict=True):
                key_ref = analysis.ref_of(key, module, None) if key is not None else None
                text = analysis.modules[key_ref[1]].consts[key_ref[2]] if key_ref and key_ref[0] == "const" else key
                hook_ref = analysis.ref_of(hook, module, None)
                if isinstance(text, ast.Constant) and isinstance(text.value, str) and hook_ref in functions:
                    hooks[text.value] = hook_ref
                    hook_tables.add(("const", module.name, const))
    entry_points = set()
    root = probe_root()
    pyproject = root.parents[1] / "pyproject.toml" if root is not None else None
    if pyproject is not None and pyproject.is_file():
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
        group = conformance.string_("plugin_entry_point_group")  # where SGLang looks for general plugins
        for target in data.get("project", {}).get("entry-points", {}).get(group, {}).values():
            module_name, _, name = target.partition(":")
            ref = analysis.lookup(module_name, name)
            if ref in functions:
                entry_points.add(ref)
                if tables[ref] & hook_tables:  # it registers the hook table: it reaches every hook
                    edges[ref] |= set(hooks.values())
    reads: list[ProbeRead] = []
    for text, hook in sorted(hooks.items()):
        # A target SGLang renamed: the hook never attaches, its fields stay empty and hooks_attached says so.
        reads.append(ProbeRead(text, "", fed(hook) | {"hooks_attached"}, functions[hook].module.label))
    reached = {h: reach(h) for h in [*hooks.values(), *entry_points]}
    for ref, fn in functions.items():
        roots = [h for h in hooks.values() if ref in reached[h]] or [e for e in entry_points if ref in reached[e]]
        feeds = frozenset(f for root_ in roots for f in fed(root_))
        if not feeds:
            continue
        where = fn.module.label
        for node in fn.nodes:
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "sglang":
                for alias in node.names:
                    reads.append(ProbeRead(f"{node.module}.{alias.name}", "", feeds, where))
                    reads.append(ProbeRead(alias.name, node.module, feeds, where))
            elif isinstance(node, ast.Attribute):
                reads.append(ProbeRead(node.attr, "", feeds, where))
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                reads.append(ProbeRead(node.value, "", feeds, where))
            elif isinstance(node, ast.Name):
                const = analysis.ref_of(node, fn.module, fn)
                if const is not None and const[0] == "const" and const[1] in modules:
                    for part in ast.walk(analysis.modules[const[1]].consts[const[2]]):
                        if isinstance(part, ast.Constant) and isinstance(part.value, str):
                            reads.append(ProbeRead(part.value, "", feeds, where))
    return tuple(dict.fromkeys(reads)), frozenset({*fields, publish} - {""}), publish


# --- the table -------------------------------------------------------------------------------------------------


def _declared_checks() -> frozenset[str]:
    from sparkgate.evidence import catalog

    return frozenset(catalog.declared())


@lru_cache(maxsize=1)
def derived() -> Derived:
    """Analyse sparkgate and the probe once per process (about a second)."""
    root = product_root()
    modules = list(_tree_modules(root, "sparkgate", "sparkgate"))
    probe = probe_root()
    if probe is not None:
        modules += list(_tree_modules(probe, PROBE_PACKAGE, f"probe/src/{PROBE_PACKAGE}"))
    return derive(modules, _declared_checks())


def load_module(path: Path, name: str, label: str) -> _Module:
    """One module for `derive` (dotted `name`, shown as `label`)."""
    return _module(path, name, label)


def derive(modules: Iterable[_Module], declared: Iterable[str]) -> Derived:
    """What every source in `modules` reaches: the checks (of `declared`) and the rule modules."""
    analysis = _Analysis(modules, declared)
    # The probe's report fields first: every summary after this reads them.
    reads, analysis.probe_fields, analysis.publish_key = _probe(analysis)
    analysis.read_class_defaults()
    table: dict[Source, set[Label]] = defaultdict(set)
    for ref in list(analysis.all_functions("sparkgate")):
        for source, labels in analysis.summary(ref).direct.items():
            table[source] |= {label for label in labels if label[0] in ("check", "rule", "store")}
    for name, sources in analysis.class_defaults.items():
        for source in sources:
            table[source].add(("store", ("clsattr", name)))
    # Channels (an Evidence field, an expectations key, a default): what is stored reaches whatever reads it.
    stored: dict[Source, set[Source]] = defaultdict(set)
    for source, labels in table.items():
        for label in labels:
            if label[0] == "store":
                stored[label[1]].add(source)
    changed = True
    while changed:
        changed = False
        for channel, sources in stored.items():
            final = {label for label in table.get(channel, ()) if label[0] != "store"}
            for source in sources:
                if not final <= table[source]:
                    table[source] |= final
                    changed = True
    renames = analysis.renames()
    reaches = {}
    for source, labels in table.items():
        final = {label for label in labels if label[0] in ("check", "rule")}
        final |= {("check", new) for label in final if label[0] == "check" for new in renames.get(label[1], ())}
        if final:
            reaches[source] = frozenset(final)
    return Derived(reaches, reads, analysis.declared)


def _labels(derived_: Derived, sources: Iterable[Source]) -> set[Label]:
    return {label for source in sources for label in derived_.reaches.get(source, ())}


def fixture_sources(section: str, key: str, entry: dict[str, Any], derived_: Derived,
                    dests: dict[str, tuple[str, ...]]) -> set[Source]:
    """Every source that is this fixture entry: itself, a pattern matching it, its kind (fork-only), the variable or
    option it names, and the probe report fields it feeds."""
    text = str(entry.get("text", ""))
    sources: set[Source] = {("entry", section, key)}
    sources |= {s for s in derived_.reaches if s[0] == "entrypat" and s[1] == section and fnmatch.fnmatchcase(key, s[2])}
    if section == "fork_only":
        sources.add(("fork_kind", entry.get("kind")))
        if entry.get("kind") == "env":
            sources |= _envvar_sources(text, derived_)
    if section == "env":
        sources |= _envvar_sources(text, derived_)
    if section == "server_args":
        sources |= {("flag", option) for option in dests.get(text, ())}
    for read in probe_reads(section, entry, derived_):
        sources |= {("probe_field", f) for f in read.fields}
    return sources


def probe_reads(section: str, entry: dict[str, Any], derived_: Derived | None = None) -> list[ProbeRead]:
    """The probe's reads of a fixture entry: a hook target or import by its dotted path, a class by name and module
    (or as the class of a hooked method), an attribute by name."""
    text = str(entry.get("text", ""))
    module_path = str(entry.get("source", "")).removesuffix(".py").replace("/", ".")
    found = []
    for read in (derived_ or derived()).probe:
        if section == "hook_targets" and not read.module and read.text == text \
                or section == "classes" and read.module and read.text == text and read.module == module_path \
                or section == "classes" and not read.module and f"{read.text}.".startswith(f"{module_path}.{text}.") \
                or section in ("attributes", "fork_only") and not read.module and read.text == text \
                and entry.get("kind", "attribute") in ("attribute", "method"):
            found.append(read)
    return found


def _envvar_sources(name: str, derived_: Derived) -> set[Source]:
    """A variable, and the prefixes (`SGLANG_DSPARK_*`) that name it."""
    return {("envvar", name)} | {s for s in derived_.reaches if s[0] == "envvar" and "*" in s[1]
                                 and fnmatch.fnmatchcase(name, s[1])}


def attribute(sources: Iterable[Source], derived_: Derived | None = None) -> Attribution:
    labels = _labels(derived_ or derived(), sources)
    return Attribution(checks=tuple(sorted(n for kind, n in labels if kind == "check")),
                       rules=tuple(sorted(n for kind, n in labels if kind == "rule")))


def option_dests(flags: dict[str, Any]) -> dict[str, tuple[str, ...]]:
    """ServerArgs field -> every option string that sets it."""
    found: dict[str, set[str]] = defaultdict(set)
    for option, entry in flags.items():
        found[entry["dest"]] |= {option, *entry.get("option_strings", ())}
    return {dest: tuple(sorted(options)) for dest, options in found.items()}


def flag_sources(option: str, flags: dict[str, Any], fixture: dict[str, Any]) -> set[Source]:
    """An option is read through any of its spellings and through the ServerArgs field it sets."""
    entry = flags.get(option) or {}
    sources: set[Source] = {("flag", spelling) for spelling in {option, *entry.get("option_strings", ())}}
    dest = entry.get("dest")
    for key, server_arg in fixture.get("server_args", {}).items():
        if dest and server_arg.get("text") == dest:
            sources.add(("entry", "server_args", key))
            sources |= {s for s in derived().reaches if s[0] == "entrypat" and s[1] == "server_args"
                        and fnmatch.fnmatchcase(key, s[2])}
    return sources


def env_sources(name: str, fixture: dict[str, Any]) -> set[Source]:
    """A variable is read by name and through the fixture entries that name it."""
    sources = _envvar_sources(name, derived())
    for key, entry in fixture.get("env", {}).items():
        if entry.get("text") == name:
            sources.add(("entry", "env", key))
    for key, entry in fixture.get("fork_only", {}).items():
        if entry.get("kind") == "env" and entry.get("text") == name:
            sources |= {("entry", "fork_only", key), ("fork_kind", "env")}
    return sources
