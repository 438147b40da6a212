"""Host memory: the meminfo the sentinel reads, the headroom floor at the verdict and after, swap growth since
admission, and failing closed on a meminfo that cannot be read."""

from __future__ import annotations

import pytest

from sparkgate.evidence import host_memory
from sparkgate.evidence.client import EngineClient
from sparkgate.evidence.recheck import RecheckContext

GIB = 1024 * 1024  # kB


def meminfo(available_gib: float, swap_used_mib: float = 0.0, total_gib: float = 121.7) -> str:
    swap_total = 16 * GIB
    return (f"MemTotal:       {int(total_gib * GIB)} kB\nMemFree:        {int(available_gib * GIB * 0.8)} kB\n"
            f"MemAvailable:   {int(available_gib * GIB)} kB\nBuffers:           1024 kB\n"
            f"SwapTotal:      {swap_total} kB\nSwapFree:       {int(swap_total - swap_used_mib * 1024)} kB\n")


@pytest.fixture
def host(tmp_path):
    path = tmp_path / "meminfo"

    def write(available_gib: float, swap_used_mib: float = 0.0) -> str:
        path.write_text(meminfo(available_gib, swap_used_mib))
        return str(path)

    return write


def test_parse_reads_the_kernels_format():
    info = host_memory.parse(meminfo(20.0, swap_used_mib=10))
    assert info.available_kib == 20 * GIB and info.swap_used_kib == 10 * 1024 and info.total_kib == int(121.7 * GIB)


@pytest.mark.parametrize("text", ["", "MemTotal: 1 kB\n", "MemAvailable: lots\n"])
def test_a_meminfo_without_its_fields_is_unreadable(text):
    with pytest.raises(host_memory.MemInfoUnreadable):
        host_memory.parse(text)


@pytest.mark.parametrize(("available", "passed"), [(20.0, True), (4.0, True), (3.9, False), (1.5, False)])
def test_headroom_floor_shows_what_is_left_and_who_holds_it(host, available, passed):
    path = host(available)
    check = host_memory.headroom_check(host_memory.reading(path), path, {})
    assert check.passed is passed and check.observed["mem_available_gib"] == pytest.approx(available, abs=0.01)
    assert isinstance(check.observed["largest_processes"], list) and "rest_of_host_gib" in check.observed
    if not passed:
        assert f"{available:.1f} GiB left" in check.hint


def test_a_profile_floor_from_the_expectations_is_used(host):
    path = host(6.0)
    assert not host_memory.headroom_check(host_memory.reading(path), path,
                                          {"host": {"min_mem_available_gib": 8.0}}).passed


def test_an_unreadable_meminfo_fails_closed(tmp_path):
    path = str(tmp_path / "missing")
    with pytest.raises(host_memory.MemInfoUnreadable):
        host_memory.read(path)
    check = host_memory.headroom_check(host_memory.reading(path), path, {})
    assert not check.passed and "cannot be read" in check.hint


def context(path: str) -> RecheckContext:
    ctx = RecheckContext("host", EngineClient("http://engine:30000"), 5.0, {})
    host_memory.start_rechecks(ctx, path)
    return ctx


def test_swap_growth_is_measured_from_admission(host):
    path = host(20.0, swap_used_mib=100)  # swap already in use at admission is the baseline
    ctx = context(path)
    host(20.0, swap_used_mib=300)
    [ok] = host_memory.rechecks(ctx)
    assert ok.passed and ok.observed["grown_since_admission_mib"] == pytest.approx(200, abs=1)
    host(20.0, swap_used_mib=400)
    [grown] = host_memory.rechecks(ctx)
    assert not grown.passed and grown.observed["grown_since_admission_mib"] == pytest.approx(300, abs=1)


def test_swap_growth_without_a_readable_meminfo_fails_closed(tmp_path, host):
    ctx = context(str(tmp_path / "missing"))
    [check] = host_memory.rechecks(ctx)
    assert not check.passed
    ctx = context(host(20.0))
    (tmp_path / "meminfo").write_text("garbage\n")
    [check] = host_memory.rechecks(ctx)
    assert not check.passed and "cannot be read" in check.hint
