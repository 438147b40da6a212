"""`invoke model.pull`: download the profile's checkpoint (and its DSpark drafter) at the pinned commit into the
directories the deploy mounts, then prove every file before anything may load it.

The download, what it resumes (within a run: huggingface_hub 1.33 `file_download.py` `http_get`'s `Range`
retries) and the proof after it: docs/model.md, "Pull".
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sparkgate.deploy import checkpoint, drafter, fileproof, preflight
from sparkgate.errors import Refusal, one_line

HUB_PACKAGE = "huggingface_hub"
HUB_VERSION = "1.33.0"  # pyproject.toml, [project.optional-dependencies] model
COMMIT = re.compile(r"[0-9a-f]{40}")
TREE_CACHE = Path(".cache") / "huggingface" / "trees"  # huggingface_hub _tree_cache.py: trees/<commit>.json
MAX_TREE_BYTES = 64 << 20
MAX_ERROR_CHARS = 300
PROGRESS_INTERVAL_S = 10.0


class PullRefused(Refusal):
    """The pull stopped or its proof failed: one line with the fix; files already proven are kept."""


@dataclass(frozen=True)
class Source:
    """One repository at one commit, pulled into one directory."""

    label: str  # "checkpoint" or "drafter"
    repo: str
    revision: str
    directory: Path
    architecture: str
    custom_dir: bool  # given with --dir / --drafter-dir (then named in fix commands)


def lookup_hint(repo: str) -> str:
    return (f"look the commit up with `hf models info {repo} --expand sha` (or the Hub's commit history, "
            f"https://huggingface.co/{repo}/commits/main)")


def sources(loaded, revision: str | None = None, directory: Path | None = None,
            drafter_directory: Path | None = None) -> list[Source]:
    """What `model.pull` downloads for a profile: its checkpoint, and the drafter when DSpark is enabled."""
    profile = loaded.profile
    repo = profile.model.repo
    if revision is not None and not COMMIT.fullmatch(revision):
        raise PullRefused(f"--revision {fileproof.shown(revision)} is not a full commit hash (40 lower-case hex "
                          f"digits): a branch or tag moves under a download. Fix: {lookup_hint(repo)}, then pass "
                          "--revision <40-hex>")
    pinned = revision or profile.model.revision
    if pinned is None:
        raise PullRefused(f"{loaded.source}: model.revision is not set, and model.pull downloads only a pinned commit "
                          f"(a branch such as main moves under a download). Fix: {lookup_hint(repo)}, then pass "
                          "--revision <40-hex> or set model.revision in the profile")
    found = [Source("checkpoint", repo, pinned, _plain(directory) or preflight.model_dir(profile.model.path),
                    profile.model.architecture, directory is not None)]
    pin = drafter.Pin.of(profile.optimizations.dspark)
    if pin is not None:
        found.append(Source("drafter", pin.repo, pin.revision, _plain(drafter_directory)
                            or preflight.dspark_drafter_dir(profile.optimizations.dspark.draft_model_path),
                            pin.architecture, drafter_directory is not None))
    return found


def _plain(directory: Path | None) -> Path | None:
    return Path(directory).expanduser() if directory is not None else None


def hub():
    """huggingface_hub at the pinned version, online; refused otherwise with the fix."""
    install = f"Fix: {sys.executable} -m pip install '{HUB_PACKAGE}=={HUB_VERSION}' (pyproject.toml extra `model`)"
    try:
        import huggingface_hub
        import huggingface_hub.constants
    except ImportError:
        raise PullRefused(f"{HUB_PACKAGE} is not installed, and model.pull downloads with it. {install}") from None
    if huggingface_hub.__version__ != HUB_VERSION:
        raise PullRefused(f"{HUB_PACKAGE} {huggingface_hub.__version__} is installed, expected {HUB_VERSION} (the "
                          f"version whose download records the preflight proof is tested against). {install}")
    if huggingface_hub.constants.HF_HUB_OFFLINE:
        raise PullRefused("HF_HUB_OFFLINE is set, and model.pull needs the Hub (or a mirror named by HF_ENDPOINT). "
                          "Fix: unset HF_HUB_OFFLINE; on an air-gapped host copy a pulled directory, `.cache/` "
                          "included, and run `invoke model.verify`")
    return huggingface_hub


def pull(loaded, reference: str, *, revision: str | None = None, directory: Path | None = None,
         drafter_directory: Path | None = None, endpoint: str | None = None, max_workers: int = 8,
         say: Callable[[str], None] = print, interval_s: float = PROGRESS_INTERVAL_S) -> list[Source]:
    """Download and prove each source; raise PullRefused at the first that cannot be proven."""
    planned = sources(loaded, revision, directory, drafter_directory)
    library = hub()
    endpoint = endpoint or os.environ.get("HF_ENDPOINT") or None
    for source in planned:
        _guard(source, reference)
        where = f" from {endpoint}" if endpoint else ""
        say(f"pulling {source.label} {source.repo} at {source.revision}{where} into {source.directory}")
        source.directory.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        _download(library, source, reference, endpoint, max_workers, say, interval_s)
        say(f"      downloaded in {time.monotonic() - started:.1f} s; proving every file against its record")
        if source.label == "checkpoint":
            _prove_checkpoint(library, loaded, reference, source, endpoint, max_workers, say, interval_s)
        else:
            _prove_drafter(loaded, source, say)
    say(f"pulled: {', '.join(str(s.directory) for s in planned)}; "
        f"deploy with `invoke deploy --profile {reference} --target spark`")
    return planned


def _fix(source: Source, reference: str) -> str:
    if source.label == "drafter":
        argv = ["invoke", "model.pull", "--profile", reference]
        return shlex.join([*argv, "--drafter-dir", str(source.directory)] if source.custom_dir else argv)
    return checkpoint.pull_command(reference, source.directory if source.custom_dir else None)


def _guard(source: Source, reference: str) -> None:
    """Refuse before writing anything into a directory that holds something else: a pull into it would mix two
    models (or spill 60 GB into a parent directory such as ~/models)."""
    directory = source.directory
    if not str(directory).isprintable():
        raise PullRefused(f"{fileproof.name(directory)}: the {source.label} directory's name holds control characters. "
                          "Fix: pull into a plain path")
    if directory.exists() and not directory.is_dir():
        raise PullRefused(f"{fileproof.name(directory)}: exists and is not a directory. Fix: pull into a directory "
                          "(--dir, SPARKGATE_MODEL_DIR or SPARKGATE_DSPARK_DIR)")
    if not directory.is_dir() or not any(directory.iterdir()):
        return
    config = directory / checkpoint.CONFIG
    if config.is_file() and fileproof.inside(directory.resolve(), config):
        try:
            with config.open("rb") as handle:
                architectures = json.loads(handle.read(checkpoint.MAX_CONFIG_BYTES).decode("utf-8")).get("architectures")
        except (OSError, UnicodeDecodeError, ValueError, RecursionError, AttributeError):
            return  # a broken config is the proof's to name; the pull replaces it
        if isinstance(architectures, list) and source.architecture in architectures:
            return
        raise PullRefused(f"{fileproof.name(config)}: architectures {fileproof.shown(architectures)}, expected "
                          f"{[source.architecture]!r}: the directory holds another model, and a pull into it would "
                          "mix two models. Fix: pull into an empty directory (--dir, SPARKGATE_MODEL_DIR or "
                          "SPARKGATE_DSPARK_DIR), or move this one aside")
    if not (directory / fileproof.METADATA_DIR).is_dir():
        raise PullRefused(f"{fileproof.name(directory)}: holds files but neither a config.json nor a download's "
                          f"{fileproof.METADATA_DIR}/ (not a model directory; a parent such as ~/models?). "
                          f"Fix: pull into an empty directory: {_fix(source, reference)} --dir <empty dir>")


def _download(library, source: Source, reference: str, endpoint: str | None, max_workers: int,
              say: Callable[[str], None], interval_s: float, only: list[str] | None = None) -> None:
    from huggingface_hub import errors
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    rerun = f"rerun `{_fix(source, reference)}` (files already downloaded are kept and not fetched again)"
    progress = Progress(source, say, interval_s, only)
    bars_were_disabled = are_progress_bars_disabled()
    disable_progress_bars()  # one line every interval_s instead of a redrawn bar per file
    progress.start()
    try:
        library.snapshot_download(source.repo, revision=source.revision, local_dir=source.directory,
                                  endpoint=endpoint, max_workers=max_workers, allow_patterns=only)
    except errors.RevisionNotFoundError:
        raise PullRefused(f"{source.repo} has no commit {source.revision} on the Hub. Fix: check the pin "
                          f"({'model.revision or --revision' if source.label == 'checkpoint' else 'optimizations.dspark.drafter_revision'}): "
                          f"{lookup_hint(source.repo)}") from None
    except errors.GatedRepoError:
        raise PullRefused(f"{source.repo} is gated and this token may not read it. Fix: accept its terms on the "
                          "Hub, then `hf auth login` (or set HF_TOKEN)") from None
    except errors.RepositoryNotFoundError:
        raise PullRefused(f"{source.repo}: no such repository, or it is private to another account. Fix: check the "
                          "repository name (model.repo) and your token (`hf auth login`)") from None
    except OSError as exc:  # huggingface_hub's HTTP errors are OSErrors too
        if getattr(exc, "errno", None) == 28:  # ENOSPC
            raise PullRefused(f"{source.directory}: no space left on the device while downloading "
                              f"{source.repo}. Fix: free space (the checkpoint needs 60-66 GB), then {rerun}") from None
        raise PullRefused(f"download of {source.repo} at {source.revision[:12]} into {source.directory} stopped: "
                          f"{type(exc).__name__}: {_short(exc)}. Fix: {rerun}") from None
    except Exception as exc:  # httpx transport errors that are no OSError, a ValueError for an oversized file
        import httpx

        if not isinstance(exc, (httpx.HTTPError, ValueError)):
            raise
        raise PullRefused(f"download of {source.repo} at {source.revision[:12]} into {source.directory} stopped: "
                          f"{type(exc).__name__}: {_short(exc)}. Fix: {rerun}") from None
    finally:
        progress.stop()
        if not bars_were_disabled:
            enable_progress_bars()


def _human(size: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.2f} {unit}"
    return f"{size:.0f} B"


def _short(exc: BaseException) -> str:
    text = one_line(str(exc)) or type(exc).__name__
    return text if len(text) <= MAX_ERROR_CHARS else f"{text[:MAX_ERROR_CHARS]}…"


def _prove_checkpoint(library, loaded, reference: str, source: Source, endpoint: str | None, max_workers: int,
                      say: Callable[[str], None], interval_s: float) -> None:
    expect = checkpoint.Expect.from_profile(loaded.profile, reference, source.directory if source.custom_dir else None,
                                            source.revision)
    indent = lambda line: say(f"      {line}")  # noqa: E731
    report = checkpoint.check(source.directory, expect, say=indent, full=True)
    tally = report.tally
    seconds = report.seconds
    root = source.directory.resolve()
    # Only what this pull wrote at the pin: a leftover recorded at another commit is refused, never deleted.
    repairable = [relative for relative in report.tally.mismatched if _commit(root, relative) == source.revision]
    if repairable:
        for relative in repairable:
            say(f"      {relative}: its content differs from what the Hub recorded for it; removing it and fetching "
                "it again")
            (root / relative).unlink(missing_ok=True)
            fileproof.record_path(root, relative).unlink(missing_ok=True)
        _download(library, source, reference, endpoint, max_workers, say, interval_s, only=repairable)
        again = checkpoint.check(source.directory, expect, say=indent, full=True, only=set(repairable))
        report = again
        tally = fileproof.Tally(tally.files + again.tally.files, tally.bytes + again.tally.bytes)
        seconds += again.seconds
    _conclude(source, report.problems, tally, seconds, say)


def _commit(root: Path, relative: str) -> str | None:
    found = fileproof.metadata(root, relative)
    return found[0] if isinstance(found, tuple) else None


def _prove_drafter(loaded, source: Source, say: Callable[[str], None]) -> None:
    settings = loaded.profile.optimizations.dspark
    pin = drafter.Pin(source.repo, source.revision, settings.drafter_architecture, settings.block_size,
                      loaded.profile.sglang.context_length)
    started = time.monotonic()
    found = drafter.problems(source.directory, pin, say=lambda line: say(f"      {line}"))
    root = source.directory.resolve()
    files = sorted(fileproof.recorded(root) & fileproof.present(root)[0])
    size = sum((root / relative).stat().st_size for relative in files if fileproof.is_regular(root / relative))
    _conclude(source, found, fileproof.Tally(len(files), size), time.monotonic() - started, say)


def _conclude(source: Source, found: list[str], tally: fileproof.Tally, seconds: float,
              say: Callable[[str], None]) -> None:
    for line in found:
        say(f"      [FAIL] {line}")
    if found:
        more = f" (and {len(found) - 1} more above)" if len(found) > 1 else ""
        raise PullRefused(f"the pulled {source.label} is not proven: {found[0]}{more}")
    rate = tally.bytes / 1e9 / seconds if seconds > 0 else float("inf")
    say(f"      proved {source.label} {source.repo} at {source.revision[:12]}: {tally.files} files, "
        f"{_human(tally.bytes)} hashed in {seconds:.1f} s ({rate:.2f} GB/s); every file as the Hub recorded it, "
        "none added")


class Progress:
    """Prints how far a download has got every `interval_s`: bytes on disk against the repository's size, from
    the tree listing huggingface_hub caches before it fetches (`.cache/huggingface/trees/<commit>.json`)."""

    def __init__(self, source: Source, say: Callable[[str], None], interval_s: float, only: list[str] | None = None):
        self.source, self.say, self.interval_s, self.only = source, say, interval_s, only
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sparkgate-pull-progress", daemon=True)
        self._last: tuple[float, int] | None = None
        self._warned = False

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._safe_tick(final=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._safe_tick()

    def _safe_tick(self, final: bool = False) -> None:
        with contextlib.suppress(OSError):  # a directory changing under the walk: the next line reports
            self.tick(final)

    def _tree(self) -> dict[str, int] | None:
        path = self.source.directory / TREE_CACHE / f"{self.source.revision}.json"
        try:
            with path.open("rb") as handle:
                files = json.loads(handle.read(MAX_TREE_BYTES).decode("utf-8"))["files"]
            sizes = {relative: int(entry["size"]) for relative, entry in files.items()}
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError):
            return None
        return {relative: size for relative, size in sizes.items() if self.only is None or relative in self.only}

    def tick(self, final: bool = False) -> None:
        sizes = self._tree()
        if sizes is None:
            return
        directory = self.source.directory
        done = complete = 0
        for relative, size in sizes.items():
            try:
                on_disk = (directory / relative).stat().st_size
            except OSError:
                continue
            if fileproof.record_path(directory, relative).is_file():
                complete += 1
            done += min(on_disk, size)
        partial = directory / fileproof.METADATA_DIR
        for incomplete in partial.rglob("*.incomplete") if partial.is_dir() else ():
            try:
                done += incomplete.stat().st_size
            except OSError:
                continue
        total = sum(sizes.values())
        now = time.monotonic()
        rate = ""
        if self._last is not None and now > self._last[0]:
            rate = f", {_human(max(done - self._last[1], 0) / (now - self._last[0]))}/s"
        self._last = (now, done)
        if not self._warned:
            self._warned = True
            free = shutil.disk_usage(directory).free
            if total - done > free:
                self.say(f"      warning: {_human(total - done)} still to download, {_human(free)} free on "
                         f"{directory}'s device")
        percent = 100 * done / total if total else 100.0
        state = "downloaded" if final else "downloading"
        self.say(f"      {state} {self.source.label} {self.source.repo}: {_human(done)} of {_human(total)} "
                 f"({percent:.0f}%){rate}, {complete} of {len(sizes)} files")
