"""Human-readable tables (rich) for profiles, launches and refusals."""

from __future__ import annotations

import shlex

from rich.console import Console
from rich.table import Table

from sparkgate.profile import loading as profiles_mod
from sparkgate.profile.loading import LoadedProfile
from sparkgate.profile.problems import ProfileError


def console(stderr: bool = False) -> Console:
    # Logs and CI have no terminal: give tables room instead of rich's 80-column default.
    probe = Console(stderr=stderr)
    width = None if probe.is_terminal else 160
    return Console(stderr=stderr, highlight=False, width=width)


def profiles_table() -> Table:
    table = Table(title="profiles", show_lines=False)
    table.add_column("profile")
    table.add_column("optimizations")
    table.add_column("description")
    for name in profiles_mod.available_profiles():
        try:
            loaded = profiles_mod.load(name)
            requested = ", ".join(loaded.profile.requested()) or "-"
            description = loaded.profile.description
        except ProfileError as exc:
            requested, description = "INVALID", str(exc).splitlines()[0]
        table.add_row(name, requested, description)
    return table


def launch_tables(loaded: LoadedProfile) -> list[Table]:
    profile = loaded.profile
    argv_table = Table(title=f"{profile.name}: SGLang argv ({loaded.source})")
    argv_table.add_column("flag")
    argv_table.add_column("value")
    argv_table.add_column("set by")
    for occurrence in loaded.plan.options:
        argv_table.add_row(
            occurrence.parsed.written, " ".join(occurrence.parsed.values), occurrence.field
        )
    env_table = Table(title=f"{profile.name}: engine environment")
    env_table.add_column("variable")
    env_table.add_column("value")
    env_table.add_column("set by")
    for entry in loaded.plan.env:
        env_table.add_row(entry.name, entry.value or '""', entry.field)
    evidence = Table(title=f"{profile.name}: evidence the gate must see")
    evidence.add_column("optimization")
    evidence.add_column("requested")
    evidence.add_column("evidence")
    from sparkgate.optimizations import REGISTRY

    for key, module in REGISTRY.items():
        expected = module.expectations(profile)
        shown = {k: v for k, v in expected.items() if k != "requested"}
        evidence.add_row(key, "yes" if expected["requested"] else "no", ", ".join(f"{k}={v}" for k, v in shown.items()))
    return [argv_table, env_table, evidence]


def command_line(loaded: LoadedProfile) -> str:
    """For display only: the launch as one shell line."""
    return shlex.join(["python3", "-m", "sglang.launch_server", *loaded.plan.argv])
