"""Wall time of a fleet rollout on the lab, and how it scales with hosts and batch size. A benchmark, not a
test: it starts its own lab per host count (name `bench`), rolls `baseline` out fresh (first deploy on
every host) once per serial setting, prints one line per run and removes the lab.

    python benchmarks/bench_fleet.py --hosts 1,3,5 --serial '[1, "50%"]' --serial '[1, "100%"]' --serial 1

The lab's simulator runs 10x faster than a Spark (time scale 0.1, 20 s simulated startup), so the
numbers are the rollout's own overhead plus a short engine start: on Sparks, add ~8 minutes of engine
cold start per batch.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout's devtasks/

from devtasks import fleet_lab as lab  # noqa: E402
from sparkgate.fleet import rollout  # noqa: E402


def run_once(hosts: int, serial: list | int, directory: Path) -> dict:
    inventory = lab.up(hosts, directory, name="bench", say=lambda _: None)
    try:
        options = rollout.FleetOptions(inventory=inventory, profile="baseline", run_dir=directory / "controller",
                                       serial=serial if isinstance(serial, list) else [serial],
                                       report=directory / "report.json")
        started = time.monotonic()
        report = rollout.deploy(options, say=lambda _: None)
        wall = time.monotonic() - started
    finally:
        lab.down(directory, name="bench", say=lambda _: None)
    admits = [r["time_to_admit_s"] for r in report["hosts"] if r["time_to_admit_s"] is not None]
    return {"hosts": hosts, "serial": serial, "wall_s": round(wall, 1),
            "admitted": report["summary"]["admitted"], "mean_time_to_admit_s": round(sum(admits) / len(admits), 1)
            if admits else None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python benchmarks/bench_fleet.py", description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", default="3", help="comma-separated host counts (default 3)")
    parser.add_argument("--serial", action="append", default=None,
                        help="Ansible serial as JSON (repeatable; default the playbook's [1, \"50%%\"])")
    args = parser.parse_args(argv)
    serials = [json.loads(s) for s in (args.serial or ['[1, "50%"]'])]
    for hosts in (int(h) for h in args.hosts.split(",")):
        for serial in serials:
            with tempfile.TemporaryDirectory(prefix="sparkgate-fleet-bench-") as scratch:
                print(json.dumps(run_once(hosts, serial, Path(scratch))), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
