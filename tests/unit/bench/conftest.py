"""Bench tests: every test's floor file and run directories stay in its own tmp_path (never the
developer's build/bench). Fixtures come from tests/plugins/fixtures.py."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _bench_isolated(isolated_bench):
    return isolated_bench
