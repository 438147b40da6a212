"""One base for every refusal an operator sees, and one way to show it: a single line with the fix and
a non-zero exit code, never a traceback. Bugs stay tracebacks: only `Refusal` is caught."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


class Refusal(Exception):
    """An operator-facing "no": bad input, a failed precondition, a refused verdict. Its text says what
    and how to fix it; `exit_code` is what the process exits with."""

    exit_code = 1
    # False when every line already starts with where it comes from (a profile refusal names its file).
    prefixed = True

    def shown(self, prefix: str) -> str:
        return f"{prefix}: {self}" if self.prefixed and prefix else str(self)


def one_line(text: str) -> str:
    return " / ".join(line.strip() for line in str(text).splitlines() if line.strip())


def refusals_exit(prefix: str) -> Callable[[F], F]:
    """Decorate an invoke task body: a Refusal becomes invoke's Exit with one line per problem."""
    from invoke import Exit

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except Refusal as exc:
                raise Exit(exc.shown(prefix), code=exc.exit_code) from None

        return wrapper  # type: ignore[return-value]

    return decorate


def run_cli(func: Callable[[], int], prefix: str) -> int:
    """Run a console command: a Refusal prints on stderr and returns its exit code."""
    try:
        return func()
    except Refusal as exc:
        print(exc.shown(prefix), file=sys.stderr)
        return exc.exit_code
