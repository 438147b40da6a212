"""The suites the gate runs against a deployed stack, shipped with the package (no test tree in any image):

    infra/   testinfra: the engine container as rendered (argv, env, secrets, processes, ports)
    smoke/   black-box HTTP: models, a deterministic chat completion, streaming

The sentinel runs both before admission, `invoke deploy` the smoke suite through the gateway after it, and
`invoke infra` / `invoke smoke` on demand. Their pytest configuration is pytest.ini here (markers, strict), so
they run the same from a checkout and from an installed package.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

SUITES = Path(__file__).resolve().parent
CONFIG = SUITES / "pytest.ini"
# Settings a caller's environment could slip into the gate's run (fewer tests, no strict markers, other plugins):
# dropped, and no plugin loads unless named (the suites use testinfra as a library, through their conftests).
_SCRUBBED = ("PYTEST_ADDOPTS", "PYTEST_PLUGINS")
# The suites' inputs that name files: made absolute, since the suites run from their own directory.
PATH_VARIABLES = ("SPARKGATE_BUNDLE", "SPARKGATE_SMOKE_API_KEY_FILE")


def environment(extra: Mapping[str, str]) -> dict[str, str]:
    """The environment a suite runs in: this process's, less pytest's own settings, plus `extra` (paths absolute)."""
    env = {key: value for key, value in os.environ.items() if key not in _SCRUBBED}
    env.update({key: str(Path(value).resolve()) if key in PATH_VARIABLES and value else value
                for key, value in extra.items()})
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    return env


def argv(suite: str, marker: str, junit: Path | None = None) -> list[str]:
    """pytest's argv for one suite (its directory under this package), selected by `marker`."""
    return [sys.executable, "-m", "pytest", "-c", str(CONFIG), "--rootdir", str(SUITES), "-p", "no:cacheprovider",
            "-q", "-m", marker, *([f"--junitxml={junit}"] if junit else []), str(SUITES / suite)]
