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
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import Literal

_PERCENT_SPEC = re.compile(r"%(?:\([^)]*\))?[-#0 +]*\d*(?:\.\d+)?[sdifgeExXr]")
_BRACE_FIELD = re.compile(r"\{[^{}]*\}")

# Sections whose entries name the source file they live in.
SOURCED_SECTIONS = ("log_formats", "strings", "metrics", "classes", "dtypes", "attributes")
Status = Literal["found", "moved", "missing", "fork_only_absent", "fork_only_present", "stock_absent", "changed"]
# What a verdict needs: an entry that is not found (anywhere) leaves the checks that read it without evidence.
LOSS = ("missing", "fork_only_absent", "changed")


@dataclass(frozen=True)
class Finding:
    section: str
    key: str
    text: str
    source: str  # where the fixture says it is ("" for sections that name no file)
    status: Status
    where: str = ""  # the file it was found in, when it moved
    detail: str = ""

    @property
    def loses_evidence(self) -> bool:
        return self.status in LOSS

    @property
    def ok(self) -> bool:
        return self.status in ("found", "fork_only_present", "stock_absent")

    def line(self) -> str:
        what = f"{self.section}.{self.key} {self.text!r}"
        if self.status == "found":
            return f"found    {what} in {self.source or 'SGLang'}"
        if self.status == "moved":
            return f"moved    {what}: not in {self.source}, found in {self.where}"
        if self.status == "fork_only_present":
            return f"found    {what} (fork-only) in {self.where or self.source}"
        if self.status == "stock_absent":
            return f"absent   {what} (fork-only) from stock {self.source}, as expected"
        if self.status == "fork_only_absent":
            return f"missing  {what} (fork-only): not in {self.source}; this SGLang is not the fork the image needs"
        if self.status == "changed":
            return f"changed  {what}: {self.detail}"
        return f"missing  {what}: not in {self.source or 'SGLang'}{': ' + self.detail if self.detail else ''}"

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


class _Strings(ast.NodeVisitor):
    """A file's string literals (raw, and as templates with holes as `{}`), classes, functions and attributes."""

    def __init__(self) -> None:
        self.constants: set[str] = set()
        self.templates: set[str] = set()
        self.classes: set[str] = set()
        self.functions: set[str] = set()
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
        for value in node.values:  # nested expressions hold more strings
            if isinstance(value, ast.FormattedValue):
                self.visit(value.value)

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
    def log_format_in(self, fmt: str, relative: str) -> bool:
        scanned, wanted = self.scan(relative), format_template(fmt)
        return scanned is not None and any(wanted in template for template in scanned.templates)

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

    def text_in_scope(self, text: str, scope: str) -> str:
        """The first file holding `text` as plain text, in one file or (scope 'sglang') the whole package; ''."""
        candidates = self.files() if scope == "sglang" else [scope]
        return next((relative for relative in candidates if text in self.text_of(relative)), "")

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
        literal = " ".join(piece for piece, *_ in string.Formatter().parse(text))
        word = max(literal.split(), key=len, default="")
        for relative in self.files():
            if relative != source and word in self.text_of(relative) and predicate(text, relative):
                return "moved", relative
        return "missing", ""

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
    for section in SOURCED_SECTIONS:
        predicate = getattr(tree, _PREDICATES[section])
        for key, item in sorted(fixture.get(section, {}).items()):
            status, where = tree.locate(predicate, item["text"], item["source"])
            findings.append(Finding(section, key, item["text"], item["source"], status,  # type: ignore[arg-type]
                                    where if status == "moved" else ""))
    declared = tree.declared_envs()
    for key, item in sorted(fixture.get("env", {}).items()):
        status = "found" if item["text"] in declared else "missing"
        findings.append(Finding("env", key, item["text"], "sglang/srt/environ.py", status,  # type: ignore[arg-type]
                                detail="" if status == "found" else "not declared in class Envs"))
    if server_arg_fields is not None:
        fields = set(server_arg_fields)
        for key, item in sorted(fixture.get("server_args", {}).items()):
            status = "found" if item["text"] in fields else "missing"
            findings.append(Finding("server_args", key, item["text"], "ServerArgs", status,  # type: ignore[arg-type]
                                    detail="" if status == "found" else "no ServerArgs field (CLI dest) of that name"))
    if hook_target_errors is not None:
        for key, item in sorted(fixture.get("hook_targets", {}).items()):
            error = hook_target_errors.get(item["text"])
            findings.append(Finding("hook_targets", key, item["text"], "", "missing" if error else "found",
                                    detail=error or ""))
    for key, item in sorted(fixture.get("fork_only", {}).items()):
        # Absent from `absent_from` in stock; in the fork, present in `present_in` (default: the same scope).
        scope = item["absent_from"] if not fork else item.get("present_in", item["absent_from"])
        present = (item["text"] in declared) if item["kind"] == "env" else tree.text_in_scope(item["text"], scope)
        where = "sglang/srt/environ.py" if item["kind"] == "env" and present else (present or "")
        if fork:
            status = "fork_only_present" if present else "fork_only_absent"
        else:
            status = "changed" if present else "stock_absent"
        findings.append(Finding("fork_only", key, item["text"], scope, status, where,  # type: ignore[arg-type]
                                detail=f"stock SGLang already has it (in {where}): the fixture calls it fork-only"
                                if status == "changed" else ""))
    return findings


def problems(findings: Iterable[Finding]) -> list[Finding]:
    """Findings that are not a plain 'found' (moved entries included: the fixture must be updated)."""
    return [f for f in findings if not f.ok]
