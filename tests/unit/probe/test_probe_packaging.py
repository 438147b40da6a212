"""The installed sparkgate-probe distribution is what SGLang will discover, and it is this checkout."""

from __future__ import annotations

import hashlib
import importlib.metadata
from pathlib import Path

import pytest

pytestmark = pytest.mark.sglang
import sglang  # noqa: E402,F401 - needs sglang==0.5.23 (requirements/sglang-cpu.txt); missing is an error, never a skip

import sparkgate_probe  # noqa: E402
from tests.unit.probe.conftest import SGLANG_PIN  # noqa: E402

SOURCE = Path(__file__).resolve().parents[3] / "probe" / "src" / "sparkgate_probe"


def test_sglang_is_the_pinned_version():
    assert importlib.metadata.version("sglang") == SGLANG_PIN


def test_entry_point_names_engagement_probe_in_the_general_plugin_group():
    points = [ep for ep in importlib.metadata.entry_points(group="sglang.srt.plugins") if ep.name == "engagement_probe"]
    assert len(points) == 1
    assert points[0].value == "sparkgate_probe.plugin:register"
    assert points[0].dist.name == "sparkgate-probe"
    assert points[0].load() is sparkgate_probe.register


def test_probe_declares_no_dependencies():
    # It runs inside the engine's Python; any requirement would make pip touch the engine's packages.
    assert not importlib.metadata.distribution("sparkgate-probe").requires


def test_installed_probe_matches_this_checkout():
    installed = Path(sparkgate_probe.__file__).parent
    digest = lambda p: hashlib.sha256(p.read_bytes()).hexdigest()  # noqa: E731
    source = {p.name: digest(p) for p in SOURCE.glob("*.py")}
    assert source, f"no probe sources under {SOURCE}"
    stale = sorted(name for name, sha in source.items() if not (installed / name).is_file() or digest(installed / name) != sha)
    assert not stale, f"installed probe at {installed} differs from probe/ in {stale}: re-run pip install ./probe"
