"""Prove the conformance fixture against an installed SGLang's *source*: every string the gate and the simulator
read is where the fixture says it is, and every fork-only entry is present (fork image) or absent (stock).

Product code: the build guard runs it inside the engine image being built, `invoke sglang.diff` runs it on any
site-packages directory, and tests/unit/test_sglang_conformance.py runs it on the pinned 0.5.23. Source is read
with `ast`, never imported, so it works on a build host without a GPU and on a copy of SGLang that is not the one
Python would import. (ServerArgs fields and hook targets need Python: sparkgate.sglang.facts asks them in a
subprocess whose sys.path starts at the directory being proven.)

Log formats are compared with their holes normalized: an f-string's `{expr}`, a `%s`/`%.2f` and a
`{name:spec}` all become `{}`, so the literal parts and the hole positions must match.
"""

from __future__ import annotations

import ast
import re
import string
from collections.abc import Callable, Iterable
from functools import cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

_PERCENT_SPEC = re.compile(r"%(?:\([^)]*\))?[-#0 +]*\d*(?:\.\d+)?[sdifgeExXr]")
_BRACE_FIELD = re.compile(r"\{[^{}]*\}")

# Sections whose entries name the source file they live in.
SOURCED_SECTIONS = ("log_formats", "strings", "metrics", "classes", "dtypes", "attributes")
Status = Literal["found", "moved", "missing", "fork_only_absent", "fork_only_present", "runtime_only",
                 "stock_absent", "changed"]
# Proven as the fixture says. Anything else leaves the checks that read the entry without evidence until the fixture
# changes: a moved entry too (the fixture names the file, and a same text elsewhere may be another program's).
OK = ("found", "fork_only_present", "runtime_only", "stock_absent")
# Only SGLang's server: sglang/ also holds a diffusion server, benchmarks and tests with look-alike strings.
SERVER_TREE = "sglang/srt/"


class Finding(BaseModel):
    """One fixture entry's proof. Validated when it crosses a process boundary (sglang.diff's child, an image)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    section: str
    key: str
    text: str
    source: str  # where the fixture says it is ("" for sections that name no file)
    status: Status
    where: str = ""  # the file it was found in, when it moved
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status in OK

    @property
    def loses_evidence(self) -> bool:
        return not self.ok

    def line(self) -> str:
        what = f"{self.section}.{self.key} {self.text!r}"
        if self.status == "found":
            return f"found    {what} in {self.source or 'SGLang'}"
        if self.status == "moved":
            return f"moved    {what}: not in {self.source}, found in {self.where}"
        if self.status == "fork_only_present":
            return f"found    {what} (fork-only) in {self.where or self.source}"
        if self.status == "runtime_only":
            return f"runtime  {what} (fork-only): {self.detail}"
        if self.status == "stock_absent":
            return f"absent   {what} (fork-only) from stock {self.source}, as expected"
        if self.status == "fork_only_absent":
            return f"missing  {what} (fork-only): not in {self.source}; this SGLang is not the fork the image needs"
        if self.status == "changed":
            return f"changed  {what}: {self.detail}"
        return f"missing  {what}: not in {self.source or 'SGLang'}{': ' + self.detail if self.detail else ''}"

    def as_dict(self) -> dict[str, str]:
        return self.model_dump()


class _Strings(ast.NodeVisitor):
    """A file's string literals (raw, and as templates with holes as `{}`), classes, functions and attributes."""

    def __init__(self) -> None:
        self.constants: set[str] = set()
        self.templates: set[str] = set()
        self.classes: set[str] = set()
        self.functions: set[str] = set()
        self.attributes: set[str] = set()
        self.torch_attrs: set[str] = set()
        self.assigned_attributes: set[str] = set()

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                parts.append(value.value)
            else:
                parts.append("{}")
        self.templates.add("".join(parts))
        for value in node.values:  # nested expressions hold more strings
            if isinstance(value, ast.FormattedValue):
                self.visit(value.value)

    def visit_Expr(self, node: ast.Expr) -> None:
        # A bare string statement is a docstring or a disabled line: SGLang never prints or serves it.
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        # `Class.method = function`: how a patch adds a method (the fork's LM-head share, say).
        self.assigned_attributes.update(t.attr for t in node.targets if isinstance(t, ast.Attribute))
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str):
            self.constants.add(node.value)
            self.templates.add(_BRACE_FIELD.sub("{}", _PERCENT_SPEC.sub("{}", node.value)))

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.classes.add(node.name)
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self.functions.add(node.name)
        self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self.attributes.add(node.attr)
        if isinstance(node.value, ast.Name) and node.value.id == "torch":
            self.torch_attrs.add(node.attr)
        self.generic_visit(node)


def starts_a_string_in(text: str, path: Path) -> bool:
    """`text` starts a string literal of the Python file (comments and docstrings are not literals here)."""
    visitor = _Strings()
    visitor.visit(ast.parse(Path(path).read_text(encoding="utf-8", errors="replace"), filename=str(path)))
    return any(template.startswith(text) for template in visitor.templates)


def format_template(fmt: str) -> str:
    """A fixture format with every hole as `{}`."""
    return "".join(literal + ("{}" if field is not None else "")
                   for literal, field, _spec, _conv in string.Formatter().parse(fmt))


class SourceTree:
    """One SGLang installation's source, read from `root` (the directory that holds the `sglang` package)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        if not (self.root / "sglang" / "__init__.py").is_file():
            raise FileNotFoundError(f"{self.root}: no sglang package here (expected {self.root}/sglang/__init__.py)")
        self._scan = cache(self._scan_uncached)
        self._texts: dict[str, str] = {}
        self._files: list[str] | None = None

    def path(self, relative: str) -> Path:
        return self.root / relative

    def files(self) -> list[str]:
        if self._files is None:
            self._files = sorted(str(p.relative_to(self.root)) for p in (self.root / "sglang").rglob("*.py"))
        return self._files

    def _scan_uncached(self, relative: str) -> _Strings | None:
        path = self.path(relative)
        if not path.is_file():
            return None
        visitor = _Strings()
        try:
            visitor.visit(ast.parse(path.read_text(encoding="utf-8", errors="replace"), filename=relative))
        except SyntaxError:
            return None
        return visitor

    def scan(self, relative: str) -> _Strings | None:
        return self._scan(relative)

    # Each predicate answers for one file; `locate` widens it to the whole package.
    def log_format_in(self, fmt: str, relative: str, *, part: bool = False) -> bool:
        """A string (or f-string) of the file renders `fmt`: from its start, as the gate matches a log message
        from its start; anywhere inside it for a `part` SGLang appends to a longer record."""
        scanned, wanted = self.scan(relative), format_template(fmt)
        if scanned is None:
            return False
        if part:
            return any(wanted in template for template in scanned.templates)
        return any(template.startswith(wanted) for template in scanned.templates)

    def string_starting_in(self, text: str, relative: str) -> bool:
        scanned = self.scan(relative)
        return scanned is not None and any(template.startswith(text) for template in scanned.templates)

    def method_in(self, name: str, relative: str) -> bool:
        """Defined (def) or attached (`Class.name = ...`) in the file."""
        scanned = self.scan(relative)
        return scanned is not None and (name in scanned.functions or name in scanned.assigned_attributes)

    def string_in(self, text: str, relative: str) -> bool:
        scanned = self.scan(relative)
        return scanned is not None and text in scanned.constants

    def class_in(self, name: str, relative: str) -> bool:
        scanned = self.scan(relative)
        return scanned is not None and name in scanned.classes

    def attribute_in(self, name: str, relative: str) -> bool:
        scanned = self.scan(relative)
        return scanned is not None and name in scanned.attributes

    def dtype_in(self, text: str, relative: str) -> bool:
        prefix, _, name = text.partition(".")
        scanned = self.scan(relative)
        return scanned is not None and prefix == "torch" and name in scanned.torch_attrs

    def fork_entry_in(self, item: dict, scope: str) -> str:
        """The first file of `scope` ('sglang': the server tree) where a fork-only entry is real code: a method
        defined or attached, a log string (not a comment or docstring); '' when none."""
        kind, text = item["kind"], item["text"]
        holds = {"method": self.method_in, "log": self.string_starting_in}.get(kind)
        if holds is None:
            raise ValueError(f"fork_only entry of kind {kind!r}: no source proof for that kind")
        files = self.files_holding(text, SERVER_TREE if scope == "sglang" else scope)
        return next((relative for relative in files if holds(text, relative)), "")

    def text_of(self, relative: str) -> str:
        if relative not in self._texts:
            path = self.path(relative)
            self._texts[relative] = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
        return self._texts[relative]

    def locate(self, predicate: Callable[[str, str], bool], text: str, source: str) -> tuple[str, str]:
        """(status, where): found in `source`, moved to another file of the package, or missing. Other files are
        parsed only when their raw text holds the entry's longest word (SGLang has ~4,700 modules)."""
        if predicate(text, source):
            return "found", source
        for relative in self.files_holding(text):
            if relative != source and predicate(text, relative):
                return "moved", relative
        return "missing", ""

    def files_holding(self, text: str, scope: str = SERVER_TREE) -> list[str]:
        """Server files (or `scope`: a file, or a directory ending in /) whose raw text holds every word of the
        entry's literal text: only those are parsed (SGLang has ~4,700 modules, and one common word such as
        'quantization' is in 555 of them). Words, not the whole literal: the source may split a string over
        implicitly concatenated literals, or escape a character inside it."""
        literal = " ".join(piece for piece, *_ in string.Formatter().parse(text))
        words = set(re.findall(r"\w+", literal)) or {""}
        candidates = [f for f in self.files() if f.startswith(scope)] if scope.endswith("/") else [scope]
        return [f for f in candidates if all(word in self.text_of(f) for word in words)]

    def declared_envs(self) -> frozenset[str]:
        """Names assigned in `class Envs` of sglang/srt/environ.py (the variables SGLang reads)."""
        path = self.path("sglang/srt/environ.py")
        if not path.is_file():
            return frozenset()
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
        envs = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Envs"), None)
        if envs is None:
            return frozenset()
        names = set()
        for statement in envs.body:
            targets = statement.targets if isinstance(statement, ast.Assign) else (
                [statement.target] if isinstance(statement, ast.AnnAssign) else [])
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        return frozenset(names)


_PREDICATES: dict[str, str] = {
    "log_formats": "log_format_in", "strings": "string_in", "metrics": "string_in", "classes": "class_in",
    "dtypes": "dtype_in", "attributes": "attribute_in",
}


def prove_fixture(tree: SourceTree, fixture: dict, *, fork: bool, server_arg_fields: Iterable[str] | None = None,
                  hook_target_errors: dict[str, str] | None = None) -> list[Finding]:
    """One finding per fixture entry. `fork`: the image needs the fork (fork-only entries must be present) or is
    stock (they must be absent: otherwise the fixture calls something fork-only that stock already has).
    `server_arg_fields` / `hook_target_errors` come from the installed SGLang's own Python (None: not asked)."""
    findings: list[Finding] = []

    def add(section: str, key: str, item: dict, status: str, source: str, where: str = "", detail: str = "") -> None:
        findings.append(Finding(section=section, key=key, text=item["text"], source=source,
                                status=status, where=where, detail=detail))  # type: ignore[arg-type]

    for section in SOURCED_SECTIONS:
        for key, item in sorted(fixture.get(section, {}).items()):
            if section == "log_formats":
                def predicate(text: str, relative: str, part: bool = bool(item.get("part"))) -> bool:
                    return tree.log_format_in(text, relative, part=part)
            else:
                predicate = getattr(tree, _PREDICATES[section])
            status, where = tree.locate(predicate, item["text"], item["source"])
            add(section, key, item, status, item["source"], where if status == "moved" else "")
    declared = tree.declared_envs()
    for key, item in sorted(fixture.get("env", {}).items()):
        found = item["text"] in declared
        add("env", key, item, "found" if found else "missing", "sglang/srt/environ.py",
            detail="" if found else "not declared in class Envs")
    if server_arg_fields is not None:
        fields = set(server_arg_fields)
        for key, item in sorted(fixture.get("server_args", {}).items()):
            found = item["text"] in fields
            add("server_args", key, item, "found" if found else "missing", "ServerArgs",
                detail="" if found else "no ServerArgs field (CLI dest) of that name")
    if hook_target_errors is not None:
        for key, item in sorted(fixture.get("hook_targets", {}).items()):
            error = hook_target_errors.get(item["text"])
            add("hook_targets", key, item, "missing" if error else "found", "", detail=error or "")
    for key, item in sorted(fixture.get("fork_only", {}).items()):
        scope = item["absent_from"]
        if not fork:
            # Stock must not mention it at all where the fork adds it: any mention makes the claim doubtful.
            mentioned = (item["text"] in declared) if item["kind"] == "env" else next(
                (f for f in ([scope] if scope != "sglang" else tree.files()) if item["text"] in tree.text_of(f)), "")
            where = "sglang/srt/environ.py" if mentioned is True else (mentioned or "")
            add("fork_only", key, item, "changed" if mentioned else "stock_absent", scope, where,
                f"stock SGLang already has it (in {where}): the fixture calls it fork-only" if mentioned else "")
        elif str(item.get("fork_proof", "")).startswith("runtime"):
            # Source cannot tell where the fork's code carries it; the named runtime check proves it on the engine.
            add("fork_only", key, item, "runtime_only", scope, detail=f"not provable from source; proven at {item['fork_proof']}")
        elif item["kind"] == "env":
            present = item["text"] in declared
            add("fork_only", key, item, "fork_only_present" if present else "fork_only_absent", "sglang/srt/environ.py",
                "sglang/srt/environ.py" if present else "")
        else:
            where = tree.fork_entry_in(item, scope)
            add("fork_only", key, item, "fork_only_present" if where else "fork_only_absent", scope, where)
    return findings


def problems(findings: Iterable[Finding]) -> list[Finding]:
    """Findings that are not a plain 'found' (moved entries included: the fixture must be updated)."""
    return [f for f in findings if not f.ok]
