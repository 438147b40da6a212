"""The suites the gate runs against a deployed stack, shipped with the package (no test tree in any image):

    infra/   testinfra: the engine container as rendered (argv, env, secrets, processes, ports)
    smoke/   black-box HTTP: models, a deterministic chat completion, streaming

The sentinel runs both before admission, `invoke deploy` the smoke suite through the gateway after it, and
`invoke infra` / `invoke smoke` on demand. Their pytest configuration is pytest.ini here (markers, strict), so
they run the same from a checkout and from an installed package.
"""

from __future__ import annotations

import sys
from pathlib import Path

SUITES = Path(__file__).resolve().parent
CONFIG = SUITES / "pytest.ini"


def argv(suite: str, marker: str, junit: Path | None = None) -> list[str]:
    """pytest's argv for one suite (its directory under this package), selected by `marker`."""
    return [sys.executable, "-m", "pytest", "-c", str(CONFIG), "--rootdir", str(SUITES), "-p", "no:cacheprovider",
            "-q", "-m", marker, *([f"--junitxml={junit}"] if junit else []), str(SUITES / suite)]
