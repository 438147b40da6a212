"""What a profile rule gets to look at."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sparkgate.profile.problems import Problem

if TYPE_CHECKING:
    from sparkgate.bundle.launch import LaunchPlan
    from sparkgate.images import EngineImage
    from sparkgate.profile.model import Profile


@dataclass(frozen=True)
class RuleContext:
    profile: Profile
    plan: LaunchPlan
    image: EngineImage
    file_of: Callable[[str], str]  # profile field path -> the YAML file that set it
    source: str  # the profile file being loaded

    def problem(self, fields: tuple[str, ...] | list[str], message: str, fix: str) -> Problem:
        """Name the loaded file when it set one of the fields, else the first field's file; fields set
        in another file (an inherited profile) say which."""
        fields = tuple(dict.fromkeys(fields))
        files = [self.file_of(f) for f in fields]
        primary = self.source if self.source in files else files[0]
        shown = tuple(f if file == primary else f"{f} (from {file})" for f, file in zip(fields, files, strict=True))
        return Problem(primary, shown, message, fix)
