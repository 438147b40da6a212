"""Refusals that name the file, the field, what is wrong and how to fix it."""

from __future__ import annotations

from dataclasses import dataclass

from sparkgate.errors import Refusal


@dataclass(frozen=True)
class Problem:
    file: str
    fields: tuple[str, ...]
    message: str
    fix: str

    def __str__(self) -> str:
        # One line, always: a hostile value quoted in a message must not start a second line.
        text = f"{self.file}: {' + '.join(self.fields)}: {self.message}. Fix: {self.fix}"
        return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class ProfileError(Refusal):
    """Raised when a profile cannot be turned into a launch; nothing has been written."""

    prefixed = False  # each line starts with the profile file it is about

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


def single(file: str, field: str, message: str, fix: str) -> ProfileError:
    return ProfileError([Problem(file, (field,), message, fix)])
