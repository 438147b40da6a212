"""The DSpark drafter a fleet host must hold, decided on the controller from the validated profile.

The rollout passes it to the `spark_host` role as `sparkgate_dspark_drafter`; the role then asserts on
each host, before any stack is touched, the facts a single-host deploy's preflight checks
(sparkgate/deploy/drafter.py). None when the profile does not enable DSpark, or for a simulator host
(its engine mounts an empty volume at the drafter path and reads no drafter).

`python -m sparkgate.fleet.drafter_pin --profile dspark` prints the variables as JSON, for checking hosts
without a rollout: `ansible ... -m ansible.builtin.include_role -a name=spark_host -e @that.json`.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

from sparkgate.deploy.drafter import Pin
from sparkgate.errors import run_cli
from sparkgate.profile import loading as profiles


def pin(profile, target: str) -> dict | None:
    """{repo, revision, architecture, block_size} of the drafter a `target` host needs, or None."""
    drafter_pin = Pin.of(profile.optimizations.dspark, profile.sglang.context_length)
    return asdict(drafter_pin) if drafter_pin is not None and target == "spark" else None


def host_vars(profile_name: str, target: str = "spark") -> dict:
    """The Ansible variables for `spark_host` (the profile is validated first: bad input is one line)."""
    return {"sparkgate_dspark_drafter": pin(profiles.load(profile_name).profile, target)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sparkgate.fleet.drafter_pin", description=__doc__.splitlines()[0])
    parser.add_argument("--profile", required=True)
    parser.add_argument("--target", choices=("spark", "sim"), default="spark")
    args = parser.parse_args(argv)

    def run() -> int:
        sys.stdout.write(json.dumps(host_vars(args.profile, args.target)) + "\n")
        return 0

    return run_cli(run, "sparkgate fleet drafter")


if __name__ == "__main__":
    sys.exit(main())
