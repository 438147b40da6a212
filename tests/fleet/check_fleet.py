"""Check a fleet against its report after a rollout (testinfra, `ansible://` backend). Not collected by
`invoke test` (its name does not start with test_); run it by name against any inventory:

    SPARKGATE_FLEET_INVENTORY=my-sparks.yaml SPARKGATE_FLEET_REPORT=build/fleet/report.json \\
        pytest tests/fleet/check_fleet.py

Every host the report says serves a release (admitted, rolled back, or not reached but serving) is checked.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.fleet.hostchecks import check_serving


def _rows() -> list[dict]:
    report = os.environ.get("SPARKGATE_FLEET_REPORT")
    if not report or not os.environ.get("SPARKGATE_FLEET_INVENTORY"):
        raise pytest.UsageError("set SPARKGATE_FLEET_INVENTORY and SPARKGATE_FLEET_REPORT (see this file's docstring)")
    return [row for row in json.loads(Path(report).read_text())["hosts"] if row["profile"]]


@pytest.mark.parametrize("row", _rows(), ids=lambda row: row["host"])
def test_host_serves_what_the_report_says(row):
    check_serving(os.environ["SPARKGATE_FLEET_INVENTORY"], row)
