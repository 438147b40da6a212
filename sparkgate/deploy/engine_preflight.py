"""The host preflight the Spark engine container runs itself, before SGLang loads a byte.

`docker compose up` on a Spark never runs `invoke deploy`'s preflight, and running out of unified memory during load
can wedge the GB10 host. So the engine's entrypoint (`sparkgate engine --preflight FILE`) repeats the host checks it
can make from inside its container, with the same one-line reasons: MemAvailable against the profile's floor
(/proc/meminfo is the host's), the checkpoint proof and the DSpark drafter on their read-only mounts, and a writable
kernel cache. The render writes what they need (this module's `Plan`) into the bundle's preflight.json; the images are
Compose's to build. Under `invoke deploy` the same checks already passed on the host: here they pass again.
"""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

from pydantic import Field, ValidationError

from sparkgate.deploy import checkpoint, drafter, preflight
from sparkgate.deploy.preflight import PreflightFinding
from sparkgate.frozen import Frozen
from sparkgate.runtime import engine_run

FILE_NAME = "preflight.json"


class CheckpointPin(Frozen):
    repo: str
    revision: str | None
    architecture: str
    mtp: bool
    humming: bool
    pull: str


class DrafterPin(Frozen):
    directory: str
    repo: str
    revision: str
    architecture: str
    block_size: int
    context_length: int | None = None


class Plan(Frozen):
    mem_min_gib: Annotated[float, Field(gt=0, lt=1e6, allow_inf_nan=False)]
    mem_why: str
    model_dir: str
    checkpoint: CheckpointPin
    drafter: DrafterPin | None
    cache_dirs: dict[str, str]  # name -> directory in the container, named as `invoke deploy` names it


def plan(profile, reference: str, cache_dirs: dict[str, str]) -> Plan:
    """What the engine container checks for `profile` (paths as mounted in the container)."""
    expect = checkpoint.Expect.from_profile(profile, reference)
    floor, why = preflight.memory_floor(profile)
    drafter_pin = drafter.Pin.of(profile.optimizations.dspark, profile.sglang.context_length)
    return Plan(
        mem_min_gib=floor, mem_why=why, model_dir=profile.model.path,
        checkpoint=CheckpointPin(repo=expect.repo, revision=expect.revision, architecture=expect.architecture,
                                 mtp=expect.mtp, humming=expect.humming, pull=expect.pull),
        drafter=DrafterPin(directory=profile.optimizations.dspark.draft_model_path, **asdict(drafter_pin))
        if drafter_pin is not None else None,
        cache_dirs=cache_dirs,
    )


def findings(checks: Plan) -> list[PreflightFinding]:
    found = [preflight.memory(checks.mem_min_gib, checks.mem_why)]
    pin = checks.checkpoint
    report = checkpoint.check(Path(checks.model_dir), checkpoint.Expect(
        pin.repo, pin.revision, pin.architecture, pin.mtp, pin.humming, pin.pull))
    found += ([PreflightFinding("model checkpoint", False, line) for line in report.problems]
              or [PreflightFinding("model checkpoint", True, checks.model_dir)])
    if checks.drafter is not None:
        d = checks.drafter
        lines = drafter.problems(Path(d.directory), drafter.Pin(**d.model_dump(exclude={"directory"})))
        found += ([PreflightFinding("dspark drafter", False, line) for line in lines]
                  or [PreflightFinding("dspark drafter", True, d.directory)])
    for name, directory in checks.cache_dirs.items():
        ok = os.path.isdir(directory) and os.access(directory, os.W_OK)
        found.append(PreflightFinding(f"{name} cache", ok, directory if ok else
                                      f"{directory} not writable in the engine container. Fix: chown the host "
                                      "directory SPARKGATE_CACHE_DIR points at, or set SPARKGATE_CACHE_DIR"))
    return found


def refusal(path: Path) -> str | None:
    """None when every check passes; else one line: the first failing check, its reason and how many more failed."""
    try:
        checks = Plan.model_validate_json(path.read_bytes())
    except OSError as exc:
        return (f"{engine_run.PREFLIGHT_REFUSED}: cannot read {path}: {exc.strerror or exc}. "
                "Fix: re-render the bundle")
    except ValidationError as exc:
        # A field name from the file is untrusted text: repr keeps it on one line.
        where = ".".join(str(p) if isinstance(p, int) or str(p).isidentifier() else repr(p)
                         for p in exc.errors()[0]["loc"]) or "(the file)"
        return f"{engine_run.PREFLIGHT_REFUSED}: {path}: {where}: {exc.errors()[0]['msg']}. Fix: re-render the bundle"
    found = findings(checks)
    failed = [f for f in found if not f.ok]
    if not failed:
        return None
    more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
    return f"{engine_run.PREFLIGHT_REFUSED}: {failed[0].check}: {failed[0].detail}{more}"
