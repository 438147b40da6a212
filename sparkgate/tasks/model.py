"""Model tasks: `invoke model.pull` (download the pinned checkpoint, and the DSpark drafter when the profile uses
one, then prove every file) and `invoke model.verify` (the same proof, offline, on a directory already there).
The work is in sparkgate/deploy/pull.py and sparkgate/deploy/checkpoint.py (docs/model.md)."""

from __future__ import annotations

from pathlib import Path

from invoke import Collection

from sparkgate.errors import Refusal
from sparkgate.tasks.common import require, sparkgate_task


class ModelRefused(Refusal):
    """A checkpoint or drafter directory that is not proven."""


@sparkgate_task("model.pull", help={
    "profile": "profile name or YAML path: its model.repo at model.revision (and its DSpark drafter, when enabled)",
    "revision": "the checkpoint commit to pull (40 hex digits) when the profile does not pin model.revision",
    "dir": "checkpoint directory (default SPARKGATE_MODEL_DIR, else ~/models/<basename of model.path>)",
    "drafter_dir": "DSpark drafter directory (default SPARKGATE_DSPARK_DIR, else ~/models/<basename of its path>)",
    "workers": "files downloaded at once (default 8)",
})
def pull(c, profile=None, revision=None, dir=None, drafter_dir=None, workers=8):
    """Download the pinned checkpoint (and drafter) with huggingface_hub, resumably, then prove every file.

    Exits 0 only when every file hashes to what the Hub recorded for it and nothing else is in the directory.
    """
    from sparkgate.deploy import pull as pull_mod
    from sparkgate.profile import loading as profiles

    reference = require(profile, "profile", "invoke model.pull --profile all-three")
    loaded = profiles.load(reference)
    pull_mod.pull(loaded, reference, revision=revision or None, directory=Path(dir) if dir else None,
                  drafter_directory=Path(drafter_dir) if drafter_dir else None, max_workers=int(workers),
                  say=lambda line: print(line, flush=True))


@sparkgate_task("model.verify", help={
    "profile": "profile name or YAML path whose checkpoint (and DSpark drafter) to prove",
    "dir": "checkpoint directory, e.g. a copy on an air-gapped host (default SPARKGATE_MODEL_DIR, else "
           "~/models/<basename of model.path>)",
    "drafter_dir": "DSpark drafter directory (default SPARKGATE_DSPARK_DIR, else ~/models/<basename of its path>)",
    "revision": "the commit the directory must hold, when the profile does not pin model.revision",
    "quick": "the deploy preflight's checks only: config, index, shard headers, records (weights not hashed)",
})
def verify(c, profile=None, dir=None, drafter_dir=None, revision=None, quick=False):
    """Prove a checkpoint directory offline: config fields, index, shard headers, revision, every file's hash.

    Needs no network and no huggingface_hub. Exits 0 only when the directory is proven.
    """
    import time

    from sparkgate.deploy import checkpoint, drafter, preflight
    from sparkgate.deploy import pull as pull_mod
    from sparkgate.profile import loading as profiles

    reference = require(profile, "profile", "invoke model.verify --profile all-three")
    loaded = profiles.load(reference)
    if revision and not pull_mod.COMMIT.fullmatch(revision):
        raise ModelRefused(f"--revision {revision!r} is not a full commit hash (40 lower-case hex digits). "
                           f"Fix: {pull_mod.lookup_hint(loaded.profile.model.repo)}")
    custom = Path(dir).expanduser() if dir else None
    directory = custom or preflight.model_dir(loaded.profile.model.path)
    expect = checkpoint.Expect.from_profile(loaded.profile, reference, custom, revision or None)
    failed: list[str] = []
    say = lambda line: print(f"      {line}", flush=True)  # noqa: E731
    print(f"verifying checkpoint {directory} ({expect.repo} at "
          f"{expect.revision[:12] if expect.revision else 'the commit its records name: model.revision is unset'})",
          flush=True)
    report = checkpoint.check(directory, expect, say=say, full=not quick)
    failed += _show(report.problems)
    if not report.problems:
        rate = report.tally.bytes / 1e9 / report.seconds if report.seconds > 0 else float("inf")
        print(f"      [ok] {report.summary(directory, expect)}", flush=True)
        print(f"      verified {report.tally.files} files, {report.tally.bytes / 1e9:.2f} GB hashed in "
              f"{report.seconds:.1f} s ({rate:.2f} GB/s)", flush=True)
    settings = loaded.profile.optimizations.dspark
    if settings.enabled:
        drafter_path = Path(drafter_dir).expanduser() if drafter_dir else preflight.dspark_drafter_dir(
            settings.draft_model_path)
        print(f"verifying drafter {drafter_path} ({settings.drafter_repo} at {settings.drafter_revision[:12]})",
              flush=True)
        pin = drafter.Pin.of(settings, loaded.profile.sglang.context_length)
        assert pin is not None  # DSpark is on
        started = time.monotonic()
        found = drafter.problems(drafter_path, pin, say)
        failed += _show(found)
        if not found:
            print(f"      [ok] {drafter_path}: {settings.drafter_architecture} at {settings.drafter_revision[:12]}, "
                  f"every file as downloaded, none added ({time.monotonic() - started:.1f} s)", flush=True)
    if failed:
        more = f" (and {len(failed) - 1} more above)" if len(failed) > 1 else ""
        raise ModelRefused(f"not proven: {failed[0]}{more}")


def _show(lines: list[str]) -> list[str]:
    for line in lines:
        print(f"      [FAIL] {line}", flush=True)
    return lines


ns = Collection("model", pull, verify)
