"""A release for one fleet host, rendered on the controller with the same render as `invoke deploy`.

The rollout play calls this once per host (`python -m sparkgate.fleet.release ...`, delegated to the
controller) because a host's bundle depends on its own variables (target, simulator faults). It prints
one JSON object the play reads: the release id, where its bundle is, the images it runs and the guards
(memory threshold and timeout, verdict budget) the stack role applies on the host.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from sparkgate.bundle import render
from sparkgate.deploy.deploy import SIM_START_BUDGET_S, SPARK_START_BUDGET_S
from sparkgate.deploy.preflight import memory_floor
from sparkgate.errors import Refusal, run_cli
from sparkgate.fleet import drafter_pin
from sparkgate.images import load_lock
from sparkgate.profile import loading as profiles

# A simulated engine holds no weights: a lab host only needs room for three small containers.
SIM_MIN_MEM_AVAILABLE_GIB = 1
# A stopped engine releases unified memory over tens of seconds (docs/runbook.md).
MEMORY_TIMEOUT_S = 180


@dataclass(frozen=True)
class ReleaseOptions:
    profile: str
    target: str
    out: Path
    sim_faults: tuple[str, ...] = ()
    sim_time_scale: float = render.DEFAULT_SIM_TIME_SCALE
    sim_startup_s: float | None = None
    recheck_period_s: float = 5.0


def images(loaded: profiles.LoadedProfile, target: str) -> list[str]:
    lock = load_lock()
    engine = lock.local_images["sim"] if target == "sim" else lock.engine_ref(loaded.profile.image)
    return sorted({lock.local_images["sentinel"], lock.local_images["gateway"], engine})


# A simulator fault as the simulator takes it: a name, optionally `:count` or `:seconds` (docs/simulator.md).
_SIM_FAULT = re.compile(r"[a-z][a-z0-9]*(?:-[a-z0-9]+)*(?::[0-9]{1,6}s?)?")


def _check_sim_faults(faults: tuple[str, ...], target: str) -> None:
    """An inventory's fault list is untrusted: a name that is not a fault's shape (one character of a string the
    role iterated, a typo with spaces) would crash-loop the simulator and read as an engine that never starts."""
    if faults and target != "sim":
        raise Refusal(f"sparkgate_sim_faults {list(faults)} on a {target} host: simulator faults exist only on the sim "
                      "target. Fix: remove them from this host's inventory")
    fix = "Fix: write a list, e.g. `sparkgate_sim_faults: [draft-lm-head-unshared]`; docs/simulator.md lists the faults"
    for fault in faults:
        if not _SIM_FAULT.fullmatch(fault):
            raise Refusal(f"sparkgate_sim_faults: {fault[:60]!r} is not a simulator fault name (lowercase words joined "
                          f"by '-', optionally ':N' or ':Ns'). {fix}")


def build(options: ReleaseOptions) -> dict:
    _check_sim_faults(options.sim_faults, options.target)
    loaded = profiles.load(options.profile)
    render_options = render.RenderOptions(
        target=options.target, sim_faults=options.sim_faults, sim_time_scale=options.sim_time_scale,
        sim_startup_s=options.sim_startup_s, recheck_period_s=options.recheck_period_s,
    )
    files = render.render_files(loaded, render_options)
    # The id names what runs: the manifest hashes every rendered file (faults included).
    release = f"{loaded.profile.name}-{hashlib.sha256(files['manifest.json'].encode()).hexdigest()[:12]}"
    bundle = options.out / release
    render.write_atomically(bundle, files)
    spark = options.target == "spark"
    return {
        "release": release,
        "profile": loaded.profile.name,
        "target": options.target,
        "bundle": str(bundle),
        "images": images(loaded, options.target),
        "served_model": loaded.profile.model.served_name,
        "sim_faults": list(options.sim_faults),
        "min_mem_available_gib": memory_floor(loaded.profile)[0] if spark else SIM_MIN_MEM_AVAILABLE_GIB,
        "memory_timeout_s": MEMORY_TIMEOUT_S,
        "verdict_budget_s": SPARK_START_BUDGET_S if spark else SIM_START_BUDGET_S,
        # The drafter spark_host asserts on the host before anything stops (None: no DSpark, or a sim host).
        "dspark_drafter": drafter_pin.pin(loaded.profile, options.target),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sparkgate.fleet.release", description=__doc__.splitlines()[0])
    parser.add_argument("--profile", required=True)
    parser.add_argument("--target", choices=render.TARGETS, required=True)
    parser.add_argument("--out", type=Path, required=True, help="directory that receives <release>/")
    parser.add_argument("--sim-fault", action="append", default=[], help="simulator fault (repeatable)")
    parser.add_argument("--sim-time-scale", type=float, default=render.DEFAULT_SIM_TIME_SCALE)
    parser.add_argument("--sim-startup-s", type=float, default=None)
    parser.add_argument("--recheck-period-s", type=float, default=5.0)
    args = parser.parse_args(argv)
    options = ReleaseOptions(args.profile, args.target, args.out.resolve(), tuple(args.sim_fault), args.sim_time_scale,
                             args.sim_startup_s, args.recheck_period_s)

    def run() -> int:
        sys.stdout.write(json.dumps(build(options)) + "\n")
        return 0

    return run_cli(run, "sparkgate fleet release")


if __name__ == "__main__":
    sys.exit(main())
