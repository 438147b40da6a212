"""One base for every refusal an operator sees, and one way to show it: a single line with the fix and
a non-zero exit code, never a traceback. Bugs stay tracebacks: only `Refusal` is caught."""

from __future__ import annotations

import functools
import re
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


# Terminal controls (an ESC sequence can repaint the screen or plant a link), C1 controls, bidi and zero-width
# characters: shown as \uXXXX. A refusal may quote untrusted text (a capture file's content, an engine's answer).
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff]")


def inert(text: str) -> str:
    return _CONTROLS.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


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
                raise Exit(inert(exc.shown(prefix)), code=exc.exit_code) from None

        return wrapper  # type: ignore[return-value]

    return decorate


def run_cli(func: Callable[[], int], prefix: str) -> int:
    """Run a console command: a Refusal prints on stderr and returns its exit code."""
    try:
        return func()
    except Refusal as exc:
        print(inert(exc.shown(prefix)), file=sys.stderr)
        return exc.exit_code
