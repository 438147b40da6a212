"""The simulator takes nothing from the checker.

If the simulator imported the gate's constants (log signatures, class names, dtypes), every CI run
where the two agree would prove only that a string equals itself. So the simulator's modules
(`simulator/src/sparkgate_sim/*.py`) may import exactly two modules from sparkgate:

- `sparkgate.sglang.conformance`: SGLang's own strings, from a fixture that tests/unit/test_sglang_conformance.py
  holds against the installed SGLang 0.5.23 source. The checker reads the same fixture; agreement with
  it is agreement with SGLang.
- `sparkgate.sglang.parser`: SGLang's flag table (the committed CLI manifest, regenerated from SGLang's own
  parser by tests/unit/test_sglang_manifest.py), so the simulator refuses exactly what `sglang serve`
  refuses. It encodes SGLang's parser, not any decision of the gate.

Everything else (optimizations, evidence, expectations, sentinel, rules, launch, sglang.flags, sglang.fork...)
is the checker's or the renderer's and is off limits, directly or through a module-level import.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
SIM = REPO / "simulator" / "src" / "sparkgate_sim"
PRODUCT = REPO / "sparkgate"
ALLOWED = {"sparkgate.sglang.conformance", "sparkgate.sglang.parser"}


def sparkgate_imports(source: str) -> set[str]:
    """Every sparkgate module a file imports (any depth: function-level imports count too); the
    simulator's own sparkgate_sim modules are not sparkgate's."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            packages = ("sparkgate", "sparkgate.sglang")  # `from <package> import <module>` names the module
            names = [node.module] if node.module not in packages else [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        found.update(n for n in names if n == "sparkgate" or n.startswith("sparkgate."))
    return found


def test_the_scan_finds_the_simulator():
    assert {"main.py", "engine.py", "startup.py", "cli.py"} <= {p.name for p in SIM.glob("*.py")}


@pytest.mark.parametrize("path", sorted(SIM.glob("*.py")), ids=lambda p: p.name)
def test_sim_module_imports_only_the_fixture_and_the_cli_table(path):
    imported = sparkgate_imports(path.read_text(encoding="utf-8"))
    assert imported <= ALLOWED, f"{path.name} imports {sorted(imported - ALLOWED)} from the checker side"


def test_the_scan_sees_every_import_form():
    source = (
        "from sparkgate.optimizations import mtp\n"
        "import sparkgate.evidence.engine_checks\n"
        "from sparkgate.sglang import flags as F, conformance\n"
        "def late():\n    from sparkgate.bundle.expectations import build\n"
        "from sparkgate_sim import textgen\n"
        "from . import faults\n"
    )
    assert sparkgate_imports(source) == {
        "sparkgate.optimizations", "sparkgate.evidence.engine_checks", "sparkgate.sglang.flags", "sparkgate.sglang.conformance",
        "sparkgate.bundle.expectations",
    }


def test_the_allowed_modules_bring_no_checker_along():
    """What the two allowed modules import at module level stays outside the checker too."""
    root = PRODUCT / "sglang"
    conformance = sparkgate_imports((root / "conformance.py").read_text(encoding="utf-8"))
    cli_table = sparkgate_imports((root / "parser.py").read_text(encoding="utf-8"))
    fork = sparkgate_imports((root / "fork.py").read_text(encoding="utf-8"))
    assert sparkgate_imports((root / "__init__.py").read_text(encoding="utf-8")) == set()  # the package itself
    assert conformance == set()
    assert cli_table <= {"sparkgate.sglang.fork"} and fork <= {"sparkgate.sglang.conformance"}  # fork-only flags: data only
