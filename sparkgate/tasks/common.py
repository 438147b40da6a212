"""What every sparkgate invoke task shares: one decorator (options as flags only, refusals as one line)
and the options users pass to deploy, accepted by every operating task too."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from invoke import task as invoke_task

from sparkgate.errors import Refusal, refusals_exit

# Operating tasks take the options deploy took, so the line a user just typed works with status/down too.
STACK_HELP = {
    "profile": "profile name or YAML path",
    "target": "spark or sim (accepted for symmetry with deploy; the stack is found by project)",
    "port": "gateway port the stack was deployed on (default: the deploy record's, else 18000)",
    "project": "compose project name (default sparkgate-<profile>)",
    "out": "bundle directory (default build/<profile>)",
}


class MissingOption(Refusal):
    exit_code = 2


def sparkgate_task(name: str, **task_kwargs: Any) -> Callable:
    """`@sparkgate_task("status", help=...)`: every parameter is a --flag (so `--help` is never taken for a
    value), and a Refusal ends the task with `sparkgate <name>: <one line>` and its exit code."""

    def decorate(fn: Callable) -> Callable:
        task_kwargs.setdefault("positional", [])
        return invoke_task(**task_kwargs)(refusals_exit(f"sparkgate {name}")(fn))

    return decorate


def require(value: Any, option: str, example: str) -> Any:
    if value in (None, ""):
        raise MissingOption(f"--{option} is required, e.g. `{example}`")
    return value
