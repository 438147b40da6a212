"""The capture corpus (tests/fixtures/captures/): verifications of real and simulated engines, kept as capture files
so the verifier is held to them in milliseconds (tests/unit/evidence/test_capture_corpus.py).

    invoke test.captures            re-record all of it: the simulator's faults here, then the real SGLang CPU lane
    python -m tests.capture_corpus sim [DIR]      the simulator's part only
    python -m tests.capture_corpus rejudge FILE   after a deliberate change of a check: the file's recorded verdict
                                                  becomes the current code's (its recorded answers are untouched)
    python -m tests.capture_corpus bench [DIR]    per capture: its size, and the time to write, read and replay it

The real lane writes its captures when SPARKGATE_CAPTURE_CORPUS names a directory (tests/real/test_gate_verdicts.py).
A capture is named after what it shows: `<source>--<profile>--<variation>.capture.tar.gz`.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

from sparkgate.evidence import capture
from sparkgate.evidence.recording import Recording

CORPUS = Path(__file__).resolve().parent / "fixtures" / "captures"
ENV = "SPARKGATE_CAPTURE_CORPUS"
SIM_SCALE = 0.05
# (profile, faults): one healthy stack per speculative kind, and each silent failure the gate exists for.
SIM_CASES = (
    ("all-three", ""), ("all-three", "fp8-env-ignored"), ("all-three", "draft-lm-head-unshared"),
    ("all-three", "humming-fallback"), ("all-three", "mtp-draft-missing"), ("all-three", "cuda-graph-off"),
    ("all-three", "probe-missing"), ("all-three", "answers-garbled"), ("dspark", ""),
    ("dspark", "dspark-draft-graph-disabled"),
)


def file_name(source: str, profile: str, variation: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", variation.lower()).strip("-") or "healthy"
    return f"{source}--{profile}--{slug}{capture.SUFFIX}"


def lane_capture(recording: Recording, profile: str, argv: Iterable[str], env: dict[str, str]) -> capture.Capture:
    engine = recording.expectations.get("engine") or {}
    image = capture.ImageFacts(key=engine.get("image"), sglang_version=engine.get("sglang_version"),
                               capabilities=engine.get("image_capabilities") or {})
    return capture.make(recording, profile=profile, argv=argv, engine_env=env, image=image,
                        hosts=[capture.host_facts("host")], written_by="lane")


def keep(recording: Recording, profile: str, argv: Iterable[str], env: dict[str, str], source: str,
         variation: str, directory: Path) -> Path:
    return capture.write(lane_capture(recording, profile, argv, env), directory / file_name(source, profile, variation))


def record_sim(directory: Path) -> list[Path]:
    from sparkgate.bundle import expectations as expectations_mod
    from sparkgate.evidence import logs
    from sparkgate.evidence.recording import RecordingClient
    from sparkgate.evidence.verify import verify
    from sparkgate.profile import loading as profiles
    from tests.plugins.simproc import Sim, profile_launch

    written = []
    for profile, faults in SIM_CASES:
        argv, env = profile_launch(profile)
        launch_env = {**env, "SPARKGATE_SIM_FAULTS": faults} if faults else env
        with tempfile.TemporaryDirectory() as scratch:
            sim = Sim(argv, launch_env, Path(scratch), scale=SIM_SCALE).start().wait_ready()
            try:
                expectations = expectations_mod.build(profiles.load(profile), "sim", sim.scale)
                log = logs.from_file(str(sim.log_dir / f"sim-{sim.port}.out"))
                client = RecordingClient(sim.base_url)
                verdict = verify(sim.base_url, expectations, log, client=client)
                recording = Recording.of(client, expectations, log, verdict)
            finally:
                sim.stop()
        path = keep(recording, profile, argv, launch_env, "sim", faults, directory)
        written.append(path)
        print(f"{path.name}: {'PASS' if verdict.passed else 'FAIL ' + ','.join(c.name for c in verdict.failures())}",
              flush=True)
    return written


def rejudge(path: Path) -> list[dict]:
    from sparkgate.evidence.recording import replay

    captured = capture.read(path)
    again = replay(captured.recording).as_dict()
    found = capture.changes(captured.recording.verdict, again)
    recording = captured.recording.model_copy(update={"verdict": again})
    failing = [c["name"] for c in again["checks"] if not c["passed"]]
    manifest = captured.manifest.model_copy(update={"passed": bool(again["passed"]), "failing": failing})
    capture.write(captured.model_copy(update={"recording": recording, "manifest": manifest}), path)
    for change in found:
        print(f"{path.name}: {change['check']} ({change['change']}): {change['recorded']!r} -> {change['now']!r}")
    return found


def bench(directory: Path, rounds: int = 5) -> None:
    """Print, per capture, its size and the median seconds to write it, read it back and replay it (this host's
    wall clock: a benchmark that prints numbers, judged by no test)."""
    import statistics
    import time

    from sparkgate.evidence.recording import replay

    def median(action) -> float:
        times = []
        for _ in range(rounds):
            started = time.perf_counter()
            action()
            times.append(time.perf_counter() - started)
        return statistics.median(times)

    print(f"{'capture':78s} {'KiB':>6s} {'calls':>5s} {'write s':>8s} {'read s':>7s} {'replay s':>8s}")
    with tempfile.TemporaryDirectory() as scratch:
        for path in sorted(directory.glob("*" + capture.SUFFIX)):
            captured = capture.read(path)
            out = Path(scratch) / path.name
            write_s = median(lambda: capture.write(captured, out))  # noqa: B023 - used at once
            read_s = median(lambda: capture.read(path))  # noqa: B023
            replay_s = median(lambda: replay(captured.recording))  # noqa: B023
            print(f"{path.name[:78]:78s} {path.stat().st_size / 1024:6.0f} {len(captured.recording.exchanges):5d} "
                  f"{write_s:8.3f} {read_s:7.3f} {replay_s:8.3f}", flush=True)


def main(argv: list[str]) -> int:
    if argv[:1] == ["bench"]:
        bench(Path(argv[1]) if len(argv) > 1 else CORPUS)
        return 0
    if argv[:1] == ["rejudge"] and len(argv) == 2:
        rejudge(Path(argv[1]))
        return 0
    if argv[:1] != ["sim"]:
        print(__doc__, file=sys.stderr)
        return 2
    directory = Path(argv[1]) if len(argv) > 1 else CORPUS
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob("sim--*" + capture.SUFFIX):
        stale.unlink()
    record_sim(directory)
    return 0


def corpus_dir() -> Path | None:
    """Where the real lane writes its captures, when asked to re-record."""
    value = os.environ.get(ENV)
    return Path(value) if value else None


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
