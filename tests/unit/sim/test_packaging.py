"""The simulator ships on its own: the product neither imports nor contains it.

sparkgate (the product: renderer, gate, engine entrypoint) goes into the Spark engine image; the simulator
is a test and drill tool, the `sparkgate-sim` distribution under simulator/, installed only where it
runs (the runtime image and the development venv). The product names it once, as the module string the
engine entrypoint's `sim` launcher runs.
"""

from __future__ import annotations

import ast
import importlib.util
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from sparkgate.bundle import image_build
from sparkgate.runtime import engine_entrypoint

REPO = Path(__file__).resolve().parents[3]
SIM_MODULE = "sparkgate_sim"
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")


def simulator_imports(source: str) -> list[str]:
    """Every import of the simulator in a file: import statements at any depth, and importlib /
    __import__ calls with a literal module name."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                names = [node.args[0].value]
        found += [name for name in names if name == SIM_MODULE or name.startswith(f"{SIM_MODULE}.")]
    return found


def test_the_scan_sees_every_way_to_import_the_simulator():
    source = (
        "import sparkgate_sim\n"
        "from sparkgate_sim.engine import Engine\n"
        "def late():\n    import importlib\n    importlib.import_module('sparkgate_sim.main')\n"
        "__import__('sparkgate_sim')\n"
        "import sparkgate_probe, sparkgate.sim_time\n"
        "LAUNCH = ['-m', 'sparkgate_sim']\n"
    )
    assert sorted(simulator_imports(source)) == ["sparkgate_sim", "sparkgate_sim", "sparkgate_sim.engine", "sparkgate_sim.main"]


@pytest.mark.parametrize("path", sorted((REPO / "sparkgate").rglob("*.py")), ids=lambda p: str(p.relative_to(REPO)))
def test_no_product_module_imports_the_simulator(path: Path):
    assert simulator_imports(path.read_text(encoding="utf-8")) == [], f"{path.relative_to(REPO)} imports the simulator"


def test_the_engine_entrypoint_runs_the_simulator_by_module_name():
    assert engine_entrypoint.LAUNCHERS["sim"] == ["-m", SIM_MODULE]
    spec = importlib.util.find_spec(f"{SIM_MODULE}.__main__")
    assert spec is not None and spec.origin is not None
    # the installed simulator is this checkout's (editable), so the tests exercise the current source
    assert Path(spec.origin).resolve() == REPO / "simulator" / "src" / SIM_MODULE / "__main__.py"
    assert importlib.util.find_spec("sparkgate.sim") is None


def _build_wheel(project: Path, out: Path) -> zipfile.ZipFile:
    # --no-build-isolation: the venv's pinned setuptools builds it, offline.
    argv = [sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check", "--no-deps",
            "--no-build-isolation", "--wheel-dir", str(out), str(project)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    (wheel,) = out.glob("*.whl")
    return zipfile.ZipFile(wheel)


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> dict[str, zipfile.ZipFile]:
    """The product and simulator wheels, built from a copy of the checkout's layout (building in place
    would write build/ into the checkout, where rendered bundles live)."""
    source = tmp_path_factory.mktemp("source")
    shutil.copy2(REPO / "pyproject.toml", source / "pyproject.toml")
    for name in ("sparkgate", "simulator", "probe"):  # every package root beside the product's
        shutil.copytree(REPO / name, source / name, ignore=_IGNORE)
    return {
        "sparkgate": _build_wheel(source, tmp_path_factory.mktemp("product-wheel")),
        "sparkgate-sim": _build_wheel(source / "simulator", tmp_path_factory.mktemp("sim-wheel")),
    }


def _top_levels(wheel: zipfile.ZipFile) -> set[str]:
    return {name.split("/", 1)[0] for name in wheel.namelist()}


def test_the_product_wheel_contains_no_simulator_file(wheels):
    names = wheels["sparkgate"].namelist()
    assert _top_levels(wheels["sparkgate"]) == {"sparkgate", "sparkgate-0.1.0.dist-info"}
    assert "sparkgate/runtime/engine_entrypoint.py" in names and "sparkgate/sglang/data/sglang-conformance-0.5.23.json" in names
    assert [n for n in names if "sim/" in n or SIM_MODULE in n] == []


def test_the_simulator_wheel_is_the_simulator_and_needs_this_product(wheels):
    wheel = wheels["sparkgate-sim"]
    assert _top_levels(wheel) == {SIM_MODULE, "sparkgate_sim-0.1.0.dist-info"}
    assert f"{SIM_MODULE}/__main__.py" in wheel.namelist()
    metadata = wheel.read("sparkgate_sim-0.1.0.dist-info/METADATA").decode()
    product = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert f"Requires-Dist: sparkgate=={product['version']}" in metadata.splitlines()


def test_the_simulator_needs_no_third_party_pin_beyond_the_products():
    """The runtime image installs offline from the product's wheel set (.ci/wheels): a simulator
    dependency outside it, or at another version, would fail that build."""
    product = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    sim = tomllib.loads((REPO / "simulator" / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    third_party = {dep for dep in sim["dependencies"] if not dep.startswith("sparkgate==")}
    assert third_party and third_party <= set(product["dependencies"])


def test_the_spark_image_does_not_install_the_simulator():
    dockerfile = (REPO / "Dockerfile").read_text(encoding="utf-8")
    assert "simulator" not in dockerfile and SIM_MODULE not in dockerfile
    assert "simulator" not in image_build.SPARK_CONTEXT and "sparkgate" in image_build.SPARK_CONTEXT
