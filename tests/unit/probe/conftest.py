"""Fixtures for the engagement-probe tests: real sglang==0.5.23 code on the CPU.

The venv needs requirements/sglang-cpu.txt, `pip install --no-deps sglang==0.5.23` and
`pip install ./probe` (scripts/bootstrap does all three). Each test module imports sglang, so a missing
sglang is a collection error, never a skip.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util

import pytest

SGLANG_PIN = "0.5.23"

if importlib.util.find_spec("sglang") is not None:
    try:
        importlib.metadata.distribution("sparkgate-probe")
    except importlib.metadata.PackageNotFoundError:
        raise RuntimeError("sglang is installed but the probe is not: pip install ./probe") from None


@pytest.fixture(scope="session")
def cpu_runtime_context():
    """Publish a CPU ServerArgs the way SGLang's own unit tests do.

    Real FusedMoE/ParallelLMHead constructors and get_internal_state read the
    process-wide runtime context; nothing is resolved against a real model.
    """
    from sglang.srt.runtime_context import SpawnRanks, publish, reset_context
    from sglang.srt.server_args import ServerArgs

    reset_context()
    publish(ServerArgs(model_path="dummy", device="cpu"), role="test", ranks=SpawnRanks(world_rank=0))
    yield
    reset_context()


@pytest.fixture
def report():
    """The probe's process-wide report, empty as in a fresh scheduler process."""
    from sparkgate_probe.report import REPORT

    REPORT.clear()
    yield REPORT
    REPORT.clear()


class PluginSandbox:
    """Runs SGLang's load_plugins() as a fresh process would, and undoes its patches.

    load_plugins() is once-per-process (a module flag) and HookRegistry keeps
    class-level state, so both are reset around each test; every hook target's
    original attribute is saved through monkeypatch, which restores it after.
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import sglang.srt.plugins as plugins
        from sglang.srt.plugins.hook_registry import HookRegistry

        from sparkgate_probe.plugin import HOOK_TARGETS

        self._monkeypatch = monkeypatch
        self._plugins = plugins
        self.registry = HookRegistry
        self.originals = {}
        for target in HOOK_TARGETS:
            owner, attr = self.owner_and_attr(target)
            original = owner.__dict__[attr]
            self.originals[target] = original
            monkeypatch.setattr(owner, attr, original)  # registers the restore
        HookRegistry.reset()
        monkeypatch.setattr(plugins, "_plugins_loaded", False)

    @staticmethod
    def owner_and_attr(target: str):
        import pkgutil

        owner_path, attr = target.rsplit(".", 1)
        return pkgutil.resolve_name(owner_path), attr

    def replace_original(self, target: str, stand_in) -> None:
        """Put a cheap stand-in where HookRegistry will find the original to wrap."""
        owner, attr = self.owner_and_attr(target)
        self._monkeypatch.setattr(owner, attr, stand_in)

    def load_plugins(self, whitelist: str = "engagement_probe") -> None:
        self._monkeypatch.setenv("SGLANG_PLUGINS", whitelist)
        self._plugins.load_plugins()

    def close(self) -> None:
        self.registry.reset()


@pytest.fixture
def sandbox(monkeypatch, report):
    box = PluginSandbox(monkeypatch)
    yield box
    box.close()
