"""Profiles -> validated launch -> rendered bundle."""

from __future__ import annotations

from invoke import Collection

from sparkgate import commands
from sparkgate.errors import Refusal
from sparkgate.profile.problems import ProfileError
from sparkgate.tasks.common import require, sparkgate_task


def _refuse_if_running(profile: str) -> None:
    """Re-rendering replaces the bundle a running stack was started from (its compose.yaml and the files the
    host-side infra suite and records compare the running containers with)."""
    import shutil
    import subprocess

    from sparkgate.profile import loading as profiles_mod
    if shutil.which("docker") is None:
        return
    try:
        name = profiles_mod.load(profile).profile.name
    except ProfileError:
        return  # the render itself reports it
    running = subprocess.run(
        ["docker", "ps", "-q", "--filter", f"label=com.docker.compose.project=sparkgate-{name}"],
        capture_output=True, text=True, check=False,
    ).stdout.split()
    if running:
        raise Refusal(f"sparkgate-{name} is running from build/{name}: re-rendering would make build/{name} "
                      f"disagree with what runs. Fix: `invoke down --profile {name}` first, or `invoke deploy` (which replaces it)")


@sparkgate_task("profiles")
def profiles(c):
    """List shipped profiles with their optimizations and descriptions."""
    from sparkgate import display
    display.console().print(display.profiles_table())


@sparkgate_task("validate", help={"profile": "profile name in profiles/ or a path to a YAML file"})
def validate(c, profile=None):
    """Validate a profile (schema, SGLang flags, conflict rules); writes nothing."""
    commands.validate(require(profile, "profile", "invoke validate --profile all-three"))


@sparkgate_task("show", help={"profile": "profile name or YAML path"})
def show(c, profile=None):
    """Show a profile's SGLang argv, engine env and the evidence the gate will require."""
    commands.show(require(profile, "profile", "invoke show --profile all-three"))


@sparkgate_task(
    "render",
    help={
        "profile": "profile name or YAML path",
        "target": "spark (default) or sim",
        "dry_run": "list the files without writing them",
        "sim_time_scale": "simulator speed-up for the sim target (default: sparkgate.sim_time_scale, 0.05 = 20x faster)",
    }
)
def render(c, profile=None, target="spark", dry_run=False, sim_time_scale=None):
    """Render build/<profile>/ (compose.yaml, engine-env.json, argv.json, expectations.json, manifest.json)."""
    require(profile, "profile", "invoke render --profile all-three")
    _refuse_if_running(profile)
    commands.render_bundle(profile, target=target, sim_time_scale=float(sim_time_scale or c.config.sparkgate.sim_time_scale),
                           dry_run=dry_run)


@sparkgate_task("schema", help={"check": "fail instead of writing when the committed file is stale"})
def schema(c, check=False):
    """Export the JSON Schemas: schema/profile.schema.json (profiles) and schema/capture.schema.json (captures)."""
    commands.sync_schema(check)


@sparkgate_task("render-top-level", help={"check": "fail instead of writing when the committed file is stale"})
def render_top_level(c, check=False):
    """Write the committed compose.yaml (all-three, spark target, with build sections) and compose.sim.yaml."""
    commands.sync_top_level(check)


@sparkgate_task("manifest", help={"check": "fail instead of writing when the committed manifest is stale"})
def manifest(c, check=False):
    """Regenerate sparkgate/sglang/data/sglang-{cli,env}-0.5.23.json from the installed sglang==0.5.23."""
    commands.sync_manifests(check)


@sparkgate_task("checks-catalog", help={"check": "fail instead of writing when the committed catalog is stale"})
def checks_catalog(c, check=False):
    """Regenerate the check catalog in docs/checks/README.md from the declared checks of every module."""
    commands.sync_checks_catalog(check)


ns = Collection(profiles, validate, show, render, schema, render_top_level, manifest, checks_catalog)
