"""No import cycles in the three packages the repository ships: sparkgate, the probe and the simulator.

Two views, because each misses what the other sees:

- statically, every import of a module (function-level "import late" ones included, `if TYPE_CHECKING:`
  blocks excluded: they never run) forms a graph that must have no cycle. A late import is how a cycle
  hides from the interpreter, so it counts here;
- dynamically, every module imports first in an interpreter where none of the three packages is loaded
  yet, so no import order that happens to work in the test session covers an order that fails.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = {
    "sparkgate": REPO / "sparkgate",
    "sparkgate_probe": REPO / "probe" / "src" / "sparkgate_probe",
    "sparkgate_sim": REPO / "simulator" / "src" / "sparkgate_sim",
}
# Importing a __main__ module runs the program (the sim would start serving): they are entry points, and
# nothing imports them.
ENTRY_POINTS = {"__main__"}


def modules(packages: dict[str, Path]) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file under each package root."""
    found = {}
    for package, root in packages.items():
        for path in sorted(root.rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            parts = [package, *path.relative_to(root).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The known modules `name` imports anywhere in its file, outside `if TYPE_CHECKING:` blocks.
    `from pkg import sub` depends on pkg.sub (a submodule) or on pkg (a name defined in pkg)."""
    is_package = path.name == "__init__.py"
    skipped: set[int] = set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_type_checking(node):
            skipped.update(id(child) for stmt in node.body for child in ast.walk(stmt))
    targets: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = name.split(".") if is_package else name.split(".")[:-1]
                package = package[: len(package) - (node.level - 1)]
                base = ".".join([*package, base] if base else package)
            submodules = {f"{base}.{alias.name}" for alias in node.names} & known.keys()
            targets.update(submodules)
            if len(submodules) < len(node.names):
                targets.add(base)
    return {target for target in targets if target in known and target != name}


def import_graph(known: dict[str, Path]) -> dict[str, set[str]]:
    return {name: _imports(name, path, known) for name, path in known.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_every_package_module_is_found():
    known = modules(PACKAGES)
    for package in PACKAGES:
        assert package in known, f"{package} not found under {PACKAGES[package]}"
    assert {"sparkgate_sim.engine", "sparkgate_sim.startup", "sparkgate_probe.hooks", "sparkgate.cli"} <= known.keys()


def test_no_import_cycle_including_late_imports():
    found = cycles(import_graph(modules(PACKAGES)))
    assert found == [], f"import cycles (late imports count; TYPE_CHECKING ones do not): {found}"


def test_the_scan_sees_a_cycle_hidden_by_a_late_import(tmp_path):
    """The shape engine.py <-> startup.py had: one side imports at top level, the other inside a function."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "engine.py").write_text("from pkg.startup import run\n")
    (package / "startup.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.other import T\n"
        "def run():\n    from . import engine\n"
    )
    (package / "other.py").write_text("from pkg import startup\n")  # reached only under TYPE_CHECKING
    assert cycles(import_graph(modules({"pkg": package}))) == [["pkg.engine", "pkg.startup"]]


# Runs in a fresh interpreter: the checkout's packages first on sys.path, then for each module a
# sys.modules without any of them, so each import starts from nothing of ours.
_IMPORT_EACH = textwrap.dedent(
    """
    import importlib, json, sys, traceback
    roots, names, packages = json.loads(sys.argv[1])
    sys.path[:0] = roots
    failures = {}
    for name in names:
        for loaded in [m for m in sys.modules if m.split(".")[0] in packages]:
            del sys.modules[loaded]
        try:
            importlib.import_module(name)
        except BaseException as exc:
            failures[name] = traceback.format_exception_only(type(exc), exc)[-1].strip()
    print(json.dumps(failures))
    """
)


def import_each(roots: list[str], names: list[str], packages: list[str]) -> dict[str, str]:
    """Module -> its one-line error, for each module that fails to import first (fresh interpreter)."""
    payload = json.dumps([roots, names, packages])
    proc = subprocess.run([sys.executable, "-c", _IMPORT_EACH, payload], capture_output=True, text=True,
                          timeout=300, check=False, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_every_module_imports_first_in_a_fresh_interpreter():
    known = modules(PACKAGES)
    names = sorted(name for name in known if name.rsplit(".", 1)[-1] not in ENTRY_POINTS)
    roots = [str(REPO), str(PACKAGES["sparkgate_probe"].parent), str(PACKAGES["sparkgate_sim"].parent)]
    failures = import_each(roots, names, sorted(PACKAGES))
    assert failures == {}, "\n".join(f"{name}: {error}" for name, error in failures.items())
    assert len(names) > 100  # the walk really covered the three packages


def test_a_module_that_fails_only_when_imported_first_is_caught(tmp_path):
    """a.py and b.py take a name from each other at top level: importing either one first fails."""
    package = tmp_path / "cyclic"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from cyclic.b import B\nA = 1\n")
    (package / "b.py").write_text("from cyclic.a import A\nB = 2\n")
    failures = import_each([str(tmp_path)], ["cyclic", "cyclic.a", "cyclic.b"], ["cyclic"])
    assert sorted(failures) == ["cyclic.a", "cyclic.b"]
    assert all("ImportError" in error for error in failures.values())


def test_the_stage_map_names_only_modules_that_exist():
    """sparkgate/__init__.py maps the pipeline to modules; a rename must update the map."""
    import sparkgate

    named = set(re.findall(r"\bsparkgate(?:\.[a-z_]+)+", sparkgate.__doc__ or ""))
    known = modules(PACKAGES)
    assert {"sparkgate.profile.loading", "sparkgate.bundle.render", "sparkgate.sentinel", "sparkgate.runtime.gateway"} <= named
    assert sorted(name for name in named if name not in known) == []
