"""The simulated Spark's host memory, as its `/proc/meminfo` would show it (knob `SPARKGATE_SIM_HOST_MEMINFO`).

On a real Spark the sentinel reads the container's /proc/meminfo, which shows the host's figures (GB10's GPU
allocates from the same unified memory). On the simulator target it reads the file written here instead: the
simulator writes it at process start and then about once a second (wall time, whatever the time scale), always
atomically (a temp file in the same directory, then os.replace), so a reader never sees a partial file.

The figures are this simulator's own model, not measurements:
  - before the weights load the host has ~110 GiB available (the OS, docker, the gateway and sentinel
    containers and the engine's own process hold the rest of the 121.7 GiB);
  - the startup takes it down as it loads the weights (and the draft), sizes the memory pools and captures
    the CUDA graphs; a ready engine holds ~90 GiB, leaving ~20 GiB (a deterministic jitter of +-192 MiB);
  - no swap is in use while healthy;
  - under the `memory-pressure` runtime fault something else on the host takes the memory: within a
    fraction of a second MemAvailable is ~1.5 GiB and 600 MiB of swap is in use. Nothing else changes.
"""

from __future__ import annotations

import contextlib
import math
import os
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from sparkgate_sim import faults
from sparkgate_sim.logs import EngineLog

KIB_PER_MIB = 1024
KIB_PER_GIB = 1024 * 1024

# -- the model (GiB unless named otherwise)
MEM_TOTAL_KIB = 127_604_736  # 121.7 GiB: what the GB10 host sees of its 128 GB
SWAP_TOTAL_KIB = 16 * KIB_PER_GIB  # DGX OS's 16 GiB swap file
IDLE_AVAILABLE_GIB = 110.0  # MemAvailable before the weights load
ENGINE_POOLS_GIB = 88.5  # held after the memory pools: --mem-fraction-static sizes KV + mamba pools to fill it
ENGINE_READY_GIB = 90.0  # held when ready (+ CUDA graphs, warmup activations, allocator cache): ~20 GiB left
HEALTHY_JITTER_MIB = 192.0  # +- around the modelled MemAvailable, a function of the write count
PRESSURE_AVAILABLE_GIB = 1.5  # memory-pressure: what another process on the host leaves
PRESSURE_JITTER_MIB = 48.0
PRESSURE_SWAP_USED_KIB = 600 * KIB_PER_MIB  # memory-pressure: swap in use (none while healthy)
PRESSURE_SWAP_CACHED_KIB = 22 * KIB_PER_MIB
# The rest of the host, healthy / under pressure (the kernel reclaims page cache and slab first).
FILE_CACHE_GIB, PRESSURE_FILE_CACHE_GIB = 4.6, 0.55  # page cache (the checkpoint, images, logs)
BUFFERS_GIB, PRESSURE_BUFFERS_GIB = 0.24, 0.03
SRECLAIMABLE_GIB, PRESSURE_SRECLAIMABLE_GIB = 0.72, 0.21
SHMEM_GIB = 0.31
SUNRECLAIM_GIB = 0.94
ANON_GIB = 5.4  # the host's and the engine's processes on the CPU side (Python, tokenizer, containers)
MAPPED_GIB = 1.15
KERNEL_STACK_KIB = 38_912
PAGE_TABLES_KIB = 182_336
WMARK_LOW_KIB = 131_072  # the zones' low watermarks, as MemAvailable subtracts them

WRITE_PERIOD_S = 1.0  # wall seconds between two writes
POLL_S = 0.25  # how often the writer looks at the faults (a change is written at once)


def _pages(kib: float) -> int:
    """Whole 4 KiB pages, as the kernel counts."""
    return max(0, int(kib) // 4 * 4)


def _jitter(tick: int) -> float:
    """Deterministic, in [-1, 1]."""
    return 0.6 * math.sin(tick * 1.3) + 0.4 * math.sin(tick * 0.37 + 1.0)


class HostMemory:
    """What the simulated engine holds of the host's memory (GiB), moved by the startup sequence.

    A phase ramps the held figure linearly over its wall duration; updates from a superseded startup (an
    older epoch) are ignored."""

    def __init__(self, time_scale: float, clock: Callable[[], float] = time.monotonic):
        self._scale = time_scale
        self._clock = clock
        self._lock = threading.Lock()
        self._epoch = 0
        self._from = self._to = 0.0
        self._t0 = self._t1 = 0.0

    def restart(self, epoch: int) -> None:
        """A fresh engine process: whatever the previous one held is released."""
        with self._lock:
            self._epoch = epoch
            self._from = self._to = 0.0
            self._t0 = self._t1 = self._clock()

    def ramp_to(self, epoch: int, gib: float, sim_seconds: float) -> None:
        """From what is held now to `gib` over `sim_seconds` of simulated time."""
        now = self._clock()
        with self._lock:
            if epoch != self._epoch:
                return
            self._from = self._held(now)
            self._to = gib
            self._t0, self._t1 = now, now + max(0.0, sim_seconds) * self._scale

    def hold(self, epoch: int, gib: float) -> None:
        self.ramp_to(epoch, gib, 0.0)

    def held_gib(self) -> float:
        with self._lock:
            return self._held(self._clock())

    def _held(self, now: float) -> float:
        if now >= self._t1 or self._t1 <= self._t0:
            return self._to
        share = (now - self._t0) / (self._t1 - self._t0)
        return self._from + (self._to - self._from) * max(0.0, share)


def figures(held_gib: float, pressure: bool, tick: int = 0) -> dict[str, int]:
    """The meminfo fields (kB), in the kernel's order, for an engine holding `held_gib`."""
    healthy = _figures(held_gib, False, 0.0, None)
    jitter = _jitter(tick) * (PRESSURE_JITTER_MIB if pressure else HEALTHY_JITTER_MIB) * KIB_PER_MIB
    return _figures(held_gib, pressure, jitter, healthy)


def _figures(held_gib: float, pressure: bool, jitter_kib: float, healthy: dict[str, int] | None) -> dict[str, int]:
    if pressure:
        available = PRESSURE_AVAILABLE_GIB * KIB_PER_GIB + jitter_kib
        file_cache, buffers = PRESSURE_FILE_CACHE_GIB * KIB_PER_GIB, PRESSURE_BUFFERS_GIB * KIB_PER_GIB
        sreclaimable = PRESSURE_SRECLAIMABLE_GIB * KIB_PER_GIB
        swap_used, swap_cached = PRESSURE_SWAP_USED_KIB, PRESSURE_SWAP_CACHED_KIB
    else:
        available = (IDLE_AVAILABLE_GIB - held_gib) * KIB_PER_GIB + jitter_kib
        file_cache, buffers = FILE_CACHE_GIB * KIB_PER_GIB, BUFFERS_GIB * KIB_PER_GIB
        sreclaimable = SRECLAIMABLE_GIB * KIB_PER_GIB
        swap_used = swap_cached = 0
    available = min(max(available, 64 * KIB_PER_MIB), MEM_TOTAL_KIB)
    reclaimable = file_cache + buffers + sreclaimable
    # MemAvailable ~ MemFree + reclaimable page cache and slab - the low watermarks (mm/show_mem.c)
    free = max(available - reclaimable + 3 * WMARK_LOW_KIB, 32 * KIB_PER_MIB)
    anon = ANON_GIB * KIB_PER_GIB
    if healthy is not None and pressure:
        # the other process's pages: the free memory it took and the cache the kernel reclaimed for it
        anon += max(0, healthy["MemFree"] - free) + max(0, healthy["_reclaimable"] - reclaimable)
    shmem = SHMEM_GIB * KIB_PER_GIB
    anon_lru, file_lru = anon + shmem, file_cache + buffers
    active_anon, active_file = 0.18 * anon_lru, 0.58 * file_lru
    out = {
        "MemTotal": MEM_TOTAL_KIB,
        "MemFree": free,
        "MemAvailable": available,
        "Buffers": buffers,
        "Cached": file_cache + shmem,
        "SwapCached": swap_cached,
        "Active": active_anon + active_file,
        "Inactive": anon_lru - active_anon + file_lru - active_file,
        "Active(anon)": active_anon,
        "Inactive(anon)": anon_lru - active_anon,
        "Active(file)": active_file,
        "Inactive(file)": file_lru - active_file,
        "Unevictable": 32,
        "Mlocked": 32,
        "SwapTotal": SWAP_TOTAL_KIB,
        "SwapFree": SWAP_TOTAL_KIB - swap_used,
        "Dirty": 1_184,
        "Writeback": 0,
        "AnonPages": anon,
        "Mapped": MAPPED_GIB * KIB_PER_GIB,
        "Shmem": shmem,
        "KReclaimable": sreclaimable,
        "Slab": sreclaimable + SUNRECLAIM_GIB * KIB_PER_GIB,
        "SReclaimable": sreclaimable,
        "SUnreclaim": SUNRECLAIM_GIB * KIB_PER_GIB,
        "KernelStack": KERNEL_STACK_KIB,
        "PageTables": PAGE_TABLES_KIB,
        "CommitLimit": MEM_TOTAL_KIB // 2 + SWAP_TOTAL_KIB,  # vm.overcommit_ratio 50
        "Committed_AS": anon + 6 * KIB_PER_GIB,
    }
    result = {name: _pages(value) for name, value in out.items()}
    if healthy is None:
        result["_reclaimable"] = _pages(reclaimable)
    return result


def render(fields: dict[str, int]) -> str:
    """As fs/proc/meminfo.c prints them: the name and colon padded to 16 columns, the value right-aligned in 8."""
    return "".join(f"{name + ':':<16}{value:>8} kB\n" for name, value in fields.items() if not name.startswith("_"))


class MeminfoWriter:
    """Writes the host's meminfo file from a daemon thread; a write that fails is logged, never fatal."""

    def __init__(self, path: str, host: HostMemory, board: faults.FaultBoard, log: EngineLog):
        self.path = Path(path)
        self._host = host
        self._board = board
        self._log = log
        self._lock = threading.Lock()  # one write (temp file + replace) at a time
        self._tick = 0
        self.failed_writes = 0  # with self._tick (every attempt): the admin stats' count of attempts and failures
        self._last_error: str | None = None
        self._final = False

    def pressure(self) -> bool:
        return self._board.runtime(faults.MEMORY_PRESSURE) is not None

    def start(self) -> None:
        """The first file at once (process start), then the thread."""
        for stale in self.path.parent.glob(f".{self.path.name}.*.tmp"):  # a previous process killed mid-write
            with contextlib.suppress(OSError):
                stale.unlink()
        self.write()
        threading.Thread(target=self._loop, name="host-meminfo", daemon=True).start()

    def write(self, *, released: bool = False) -> None:
        """One atomic write. `released`: the engine process is gone (its memory is the host's again), last write."""
        with self._lock:
            if self._final:
                return
            held = 0.0 if released else self._host.held_gib()
            text = render(figures(held, self.pressure(), self._tick))
            self._tick += 1
            try:
                self._replace(text)
            except OSError as exc:
                self.failed_writes += 1
                self._report(f"{exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else ""))
            else:
                self._last_error = None
            if released:
                self._final = True

    def counts(self) -> dict[str, int]:
        with self._lock:
            return {"writes": self._tick, "failed_writes": self.failed_writes}

    def _replace(self, text: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="ascii") as handle:
                handle.write(text)
            os.chmod(tmp, 0o644)  # the sentinel may read it as another user (a shared volume)
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def _report(self, error: str) -> None:
        if error != self._last_error:  # once per distinct error, not every second
            self._log.traceback(f"sparkgate_sim: cannot write the host meminfo file {self.path}: {error}")
            self._last_error = error

    def _loop(self) -> None:
        last_write, last_pressure = time.monotonic(), self.pressure()
        while True:
            time.sleep(POLL_S)
            try:
                pressure = self.pressure()
                if pressure != last_pressure or time.monotonic() - last_write >= WRITE_PERIOD_S:
                    self.write()
                    last_write, last_pressure = time.monotonic(), pressure
            except Exception as exc:  # the writer outlives anything (and the engine never notices)
                self._report(f"{type(exc).__name__}: {exc}")
