"""A capture: one file holding everything a full verification read, so its verdict can be judged again anywhere.

    sparkgate-capture (gzip tar, schema/capture.schema.json):
      manifest.json   kind, version, profile, verdict outcome, sparkgate's version and commit, each member's sha256
      recording.json  the verification itself (evidence/recording.py): every engine answer, the admin-key probe and
                      host-memory readings, the engine log the checks read, the expectations, the verdict
      context.json    the bundle's argv and engine env, the engine image's SGLang facts, the host, the suites

The sentinel writes one after each full verification (the last, and the last refused ones); `invoke capture`
adds the host's facts and copies it out; `sparkgate verify --replay FILE` re-judges it with the current code.
Secrets never enter a capture: the recording is scrubbed by recording.py, argv and env by key and by field.
Reading is a trust boundary (a capture comes from a user's machine): every member is bounded, named, hashed and
validated, and anything else is one line naming the file and what is wrong.
"""

from __future__ import annotations

import datetime as dt
import gzip
import hashlib
import io
import json
import platform
import re
import tarfile
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sparkgate import __version__
from sparkgate.atomic import replacing
from sparkgate.errors import Refusal
from sparkgate.evidence.recording import Recording
from sparkgate.runtime.admin_key import REDACTED, redact, redact_text
from sparkgate.runtime.engine_run import EngineRun
from sparkgate.sglang import flags as F

CAPTURE_VERSION = 1
KIND = "sparkgate-capture"
SUFFIX = ".capture.tar.gz"
MEMBERS = ("manifest.json", "recording.json", "context.json")
# Bounds on what is read back. A capture holds at most a 4 MiB log and a few hundred KB of answers; these leave
# room and bound what a small hostile file can make a reader parse (memory grows with the JSON it inflates to).
MAX_FILE_BYTES = 8 * 1024 * 1024
MAX_MEMBER_BYTES = 8 * 1024 * 1024
# The engine log the checks read is kept whole up to this; beyond it the head (startup) and the tail (the latest
# records) are kept and the manifest says so (a replay of a log check may then differ, and says why).
LOG_KEEP_BYTES = 4 * 1024 * 1024
LOG_CUT = "\n[sparkgate capture: {0} bytes of the engine log left out here]\n"


# Flags whose next argv element is a secret (flags.SECRET_FLAGS), and environment names that hold one (HF_TOKEN,
# *_API_KEY, *_SECRET, *_PASSWORD): their values never enter a capture.
# Whole name segments: HF_TOKEN, OPENAI_KEY, DB_PASSWORD; not SGLANG_MAX_NEW_TOKENS_LIMIT.
_SECRET_ENV = re.compile(r"(^|_)(TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?|API_?KEY|KEY|ACCESS_KEY(_ID)?)$",
                         re.IGNORECASE)
# user:password@ inside any URL in a value (a proxy, a bucket): the credentials go, the host stays.
_URL_CREDENTIALS = re.compile(r"(://)[^/@\s]+@")


def _value(text: str, keys: tuple[str, ...]) -> str:
    return _URL_CREDENTIALS.sub(lambda m: f"{m.group(1)}{REDACTED}@", redact_text(text, keys))


def scrub_argv(argv: Iterable[str], keys: tuple[str, ...]) -> list[str]:
    out: list[str] = []
    for item in argv:
        out.append(REDACTED if out and out[-1] in F.SECRET_FLAGS else _value(str(item), keys))
    return out


def scrub_env(env: dict[str, Any], keys: tuple[str, ...]) -> dict[str, str]:
    return {str(k): REDACTED if _SECRET_ENV.search(str(k)) and v not in (None, "") else _value(str(v), keys)
            for k, v in env.items()}


class CaptureRefused(Refusal):
    """A capture file that cannot be read as one: the line names the file and what is wrong."""


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class MemberDigest(_Frozen):
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    size: int = Field(ge=0)


class Provenance(_Frozen):
    version: str
    commit: str | None = None  # the git commit sparkgate was installed from, where known


class DeployOf(_Frozen):
    """Which deploy a capture belongs to: the rendered bundle (runtime/engine_run.bundle_id) and the engine start
    (the engine container's id, Docker's hostname for it, and when its entrypoint started)."""

    bundle: str = Field(pattern=r"^[0-9a-f]{16}$")
    deploy: str | None = Field(None, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")  # the engine container
    started: str | None = Field(None, max_length=40, pattern=r"^[0-9T:.+Z-]+$")  # ISO 8601, UTC


class HostMemorySample(_Frozen):
    at: str = Field(max_length=40)
    available_kib: int = Field(ge=0)
    total_kib: int = Field(ge=0)


class StartFacts(_Frozen):
    """A start refused before any verification (the engine died): what the replay re-judges besides the log."""

    exit: EngineRun | None = None  # the entrypoint's exit record, if one was left
    exit_code: int | None = None
    phases_reached: list[str] = Field(default_factory=list, max_length=16)
    never_reached: list[str] = Field(default_factory=list, max_length=16)
    host_memory: list[HostMemorySample] = Field(default_factory=list, max_length=512)  # over the start
    refusal: str = Field(max_length=4000)


class Manifest(_Frozen):
    kind: Literal["sparkgate-capture"] = KIND
    capture_version: Literal[1] = CAPTURE_VERSION
    created: str
    # the sentinel after a verification, `invoke capture` on the host, or a test lane (tests/capture_corpus.py)
    written_by: Literal["sentinel", "host", "lane"]
    profile: str
    passed: bool  # the recorded verification's verdict (what a replay re-judges)
    failing: list[str]
    # The sentinel's decision, which also weighed what a replay cannot re-judge: its infra and smoke suites, and a
    # cold refusal carried over from this engine start's first verification. None where no sentinel decided.
    gate_passed: bool | None = None
    sparkgate: Provenance
    log_cut_bytes: int = Field(0, ge=0)  # engine log bytes left out (0: the whole log the checks read)
    # What was judged: a full verification, or a start refused before one (the engine died: context.json's start).
    judged: Literal["verification", "start"] = "verification"
    of: DeployOf | None = None  # None: written before captures named their deploy, or the deploy was unknown
    members: dict[Literal["recording.json", "context.json"], MemberDigest]


class HostFacts(_Frozen):
    source: Literal["sentinel", "host"]
    arch: str
    kernel: str
    python: str
    mem_total_kib: int | None = None
    mem_available_kib: int | None = None
    gpu: str | None = None  # `nvidia-smi --query-gpu=...` where it exists
    docker: str | None = None
    sparkgate: Provenance | None = None  # the sparkgate that ran there


class ImageFacts(_Frozen):
    key: str | None = None
    sglang_version: str | None = None
    capabilities: dict[str, Any] = Field(default_factory=dict)
    build_guard: list[dict[str, Any]] | None = None  # `sparkgate build-guard` in the engine container, where run


class Context(_Frozen):
    argv: list[str]
    engine_env: dict[str, str]
    image: ImageFacts
    hosts: list[HostFacts]
    suites: dict[str, Any] = Field(default_factory=dict)  # the sentinel's infra and smoke results
    start: StartFacts | None = None  # a refused start's facts (manifest judged == "start")


class Capture(_Frozen):
    manifest: Manifest
    recording: Recording
    context: Context

    @property
    def admitted(self) -> bool:
        """Whether the gate admitted the engine on this verification (the verdict alone where no sentinel decided)."""
        return self.manifest.passed if self.manifest.gate_passed is None else self.manifest.gate_passed


def provenance() -> Provenance:
    return Provenance(version=__version__, commit=_commit())


def _commit() -> str | None:
    """The commit sparkgate was built from: the image's label file, else the checkout it runs from."""
    for candidate in (Path("/opt/sparkgate/COMMIT"), Path(__file__).resolve().parents[2] / ".git" / "HEAD"):
        try:
            text = candidate.read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            continue
        if text.startswith("ref: "):
            try:
                text = (candidate.parent / text[5:]).read_text(encoding="ascii").strip()
            except (OSError, UnicodeDecodeError):
                continue
        if len(text) == 40 and all(c in "0123456789abcdef" for c in text):
            return text
    return None


def host_facts(source: Literal["sentinel", "host"], meminfo_path: str = "/proc/meminfo", *,
               gpu: str | None = None, docker: str | None = None) -> HostFacts:
    kib: dict[str, int] = {}
    try:
        for line in Path(meminfo_path).read_text(encoding="ascii", errors="replace")[:65536].splitlines():
            name, _, rest = line.partition(":")
            value = rest.split()[:1]
            if name in ("MemTotal", "MemAvailable") and value and value[0].isdigit():
                kib[name] = int(value[0])
    except OSError:
        pass
    return HostFacts(source=source, arch=platform.machine(), kernel=platform.release(),
                     python=platform.python_version(), mem_total_kib=kib.get("MemTotal"),
                     mem_available_kib=kib.get("MemAvailable"), gpu=gpu, docker=docker, sparkgate=provenance())


def cut_log(text: str | None, keep: int = LOG_KEEP_BYTES) -> tuple[str | None, int]:
    """The log kept whole up to `keep` bytes, else its head and tail around a marker; and the bytes left out."""
    if text is None:
        return None, 0
    data = text.encode("utf-8", "replace")
    if len(data) <= keep:
        return text, 0
    half = keep // 2
    left_out = len(data) - 2 * half
    head = data[:half].decode("utf-8", "ignore")
    tail = data[-half:].decode("utf-8", "ignore")
    return head + LOG_CUT.format(left_out) + tail, left_out


def make(recording: Recording, *, profile: str, argv: Iterable[str], engine_env: dict[str, str],
         image: ImageFacts, hosts: Iterable[HostFacts], suites: dict[str, Any] | None = None,
         written_by: Literal["sentinel", "host", "lane"] = "sentinel", secrets: Iterable[str] = (),
         log_keep: int = LOG_KEEP_BYTES, of: DeployOf | None = None, start: StartFacts | None = None) -> Capture:
    """A capture of `recording` (already scrubbed by Recording.of), with argv and env scrubbed here."""
    keys = tuple(k for k in secrets if k)
    log_text, left_out = cut_log(recording.log_text, log_keep)
    recording = recording.model_copy(update={"log_text": log_text})
    context = Context(
        argv=scrub_argv(argv, keys), engine_env=scrub_env(engine_env, keys),
        image=image, hosts=list(hosts), suites=redact(suites or {}, keys),
        start=None if start is None else StartFacts.model_validate(redact(start.model_dump(), keys)))
    verdict = recording.verdict
    failing = [str(c.get("name")) for c in verdict.get("checks", []) if not c.get("passed")]
    gate = (suites or {}).get("gate")
    gate_passed = gate.get("passed") if isinstance(gate, dict) and isinstance(gate.get("passed"), bool) else None
    manifest = Manifest(
        created=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), written_by=written_by, profile=profile,
        passed=bool(verdict.get("passed")), failing=failing, gate_passed=gate_passed, sparkgate=provenance(),
        log_cut_bytes=left_out, judged="verification" if start is None else "start", of=of,
        members={"recording.json": MemberDigest(sha256="0" * 64, size=0),
                 "context.json": MemberDigest(sha256="0" * 64, size=0)})
    return Capture(manifest=manifest, recording=recording, context=context)


def _members(capture: Capture, keys: tuple[str, ...]) -> dict[str, bytes]:
    # Every known secret (API key, admin key, a Hugging Face token) is replaced wherever it appears, once more.
    # Plain replacement only: a flag pattern run over JSON text could swallow the quote after a value.
    body = {"recording.json": _without(capture.recording.model_dump_json(), keys).encode(),
            "context.json": _without(capture.context.model_dump_json(), keys).encode()}
    manifest = capture.manifest.model_copy(update={"members": {
        name: MemberDigest(sha256=hashlib.sha256(data).hexdigest(), size=len(data)) for name, data in body.items()}})
    return {"manifest.json": manifest.model_dump_json(indent=1).encode(), **body}


def _without(text: str, keys: tuple[str, ...]) -> str:
    for key in keys:
        text = text.replace(json.dumps(key)[1:-1], REDACTED)  # the key as it appears inside a JSON string
    return text


def write(capture: Capture, path: Path, secrets: Iterable[str] = ()) -> Path:
    """Write the capture file (temp file, then rename: a reader never sees half of one)."""
    keys = tuple(k for k in secrets if k and len(k) >= 8)  # a short "key" would redact ordinary text
    files = _members(capture, keys)
    with replacing(Path(path), mode=0o600) as temp, temp.open("wb") as raw, \
            gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as zipped, tarfile.open(fileobj=zipped, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o600
            tar.addfile(info, io.BytesIO(data))
    return Path(path)


def read(path: str | Path) -> Capture:
    """The capture in `path`, or CaptureRefused naming what is wrong with it (never a traceback)."""
    path = Path(path)
    where = f"capture {path}"
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise CaptureRefused(f"{where}: cannot read it: {exc.strerror or exc}") from None
    if not path.is_file():
        raise CaptureRefused(f"{where}: not a regular file")
    if size > MAX_FILE_BYTES:
        raise CaptureRefused(f"{where}: {size} bytes, over the {MAX_FILE_BYTES} a capture may have")
    # The whole stream is inflated first, bounded, so gzip's CRC is checked (tarfile alone stops reading at the
    # archive's end marker and never reaches it) and a small file cannot inflate without limit.
    inflater = zlib.decompressobj(wbits=31)
    try:
        raw = inflater.decompress(path.read_bytes(), MAX_MEMBER_BYTES * 2)
        if not inflater.eof:
            raise CaptureRefused(f"{where}: not a readable sparkgate capture (gzip tar): truncated, or it inflates "
                                 f"past {MAX_MEMBER_BYTES * 2} bytes")
    except (zlib.error, OSError) as exc:
        raise CaptureRefused(f"{where}: not a readable sparkgate capture (gzip tar): {exc}") from None
    if inflater.unused_data:
        raise CaptureRefused(f"{where}: bytes after the end of its gzip stream (two files joined?)")
    data: dict[str, bytes] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as tar:
            for member in tar:
                if member.name not in MEMBERS or not member.isfile() or member.name in data:
                    raise CaptureRefused(f"{where}: unexpected member {member.name!r} (a capture holds exactly "
                                         f"{', '.join(MEMBERS)} as plain files)")
                if member.size > MAX_MEMBER_BYTES:
                    raise CaptureRefused(f"{where}: member {member.name} is {member.size} bytes, over "
                                         f"{MAX_MEMBER_BYTES}")
                handle = tar.extractfile(member)
                data[member.name] = handle.read() if handle else b""
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise CaptureRefused(f"{where}: not a readable sparkgate capture (gzip tar): {exc}") from None
    missing = [name for name in MEMBERS if name not in data]
    if missing:
        raise CaptureRefused(f"{where}: missing {', '.join(missing)} (truncated, or not a capture)")
    manifest = _model(Manifest, data["manifest.json"], where, "manifest.json")
    for name, digest in manifest.members.items():
        actual = hashlib.sha256(data[name]).hexdigest()
        if actual != digest.sha256 or len(data[name]) != digest.size:
            raise CaptureRefused(f"{where}: {name} does not match its manifest digest (sha256 {actual[:12]}…, "
                                 f"expected {digest.sha256[:12]}…): altered or damaged")
    recording = _model(Recording, data["recording.json"], where, "recording.json")
    if recording.log_text is not None and len(recording.log_text) > LOG_KEEP_BYTES + len(LOG_CUT) + 64:
        raise CaptureRefused(f"{where}: recording.json log_text is {len(recording.log_text)} characters, over the "
                             f"{LOG_KEEP_BYTES} a capture keeps (written by something other than sparkgate)")
    if recording.repeat_room != "retry":  # sparkgate writes every capture the current way; "own" is hand-made
        raise CaptureRefused(f"{where}: recording.json repeat_room {recording.repeat_room!r}: a capture's repeated "
                             "question is asked with the retry's room (written by something other than sparkgate)")
    context = _model(Context, data["context.json"], where, "context.json")
    if (manifest.judged == "start") != (context.start is not None):
        raise CaptureRefused(f"{where}: manifest.json judged {manifest.judged!r} does not fit context.json "
                             f"({'a' if context.start else 'no'} start record)")
    if recording.expectations.get("profile") != manifest.profile:
        raise CaptureRefused(f"{where}: manifest.json profile {manifest.profile!r} is not the recorded "
                             f"expectations' {recording.expectations.get('profile')!r}")
    return Capture(manifest=manifest, recording=recording, context=context)


def _model(model: type[BaseModel], data: bytes, where: str, member: str):
    try:
        document = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise CaptureRefused(f"{where}: {member} is not JSON: {str(exc)[:120]}") from None
    if member == "manifest.json" and isinstance(document, dict):
        version = document.get("capture_version")
        if document.get("kind") == KIND and version != CAPTURE_VERSION:
            raise CaptureRefused(f"{where}: capture_version {version!r}; this sparkgate reads version "
                                 f"{CAPTURE_VERSION} (re-capture with this version, or replay with a matching one)")
    try:
        return model.model_validate(document)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise CaptureRefused(f"{where}: {member} field {field}: {first['msg']}") from None
    except RecursionError:
        raise CaptureRefused(f"{where}: {member} is nested too deeply") from None


def rejudge(captured: Capture):
    """The verdict the current code gives on a capture: a verification replayed from its recorded answers
    (recording.replay), or a refused start judged again from its log and exit record (evidence/startup.py)."""
    if captured.context.start is None:
        from sparkgate.evidence.recording import replay

        return replay(captured.recording)
    from sparkgate.evidence import startup  # startup imports the checks, which this module must not at import

    start = captured.context.start
    return startup.start_verdict(captured.recording.expectations, captured.recording.log(),
                                 captured.recording.engine_url, start.exit, start.exit_code)


def changes(recorded: dict[str, Any], now: dict[str, Any]) -> list[dict[str, Any]]:
    """Per check, what the current code judges differently from the recorded verdict: outcome, observed value, a
    check that is new or gone. Empty when the code still reads the evidence the same way."""
    def by_name(verdict: Any) -> dict[str, dict]:
        checks = verdict.get("checks") if isinstance(verdict, dict) else None
        return {str(c.get("name")): c for c in checks if isinstance(c, dict)} if isinstance(checks, list) else {}

    before, after = by_name(recorded), by_name(now)
    found: list[dict[str, Any]] = []
    for name in [*before, *(n for n in after if n not in before)]:
        old, new = before.get(name), after.get(name)
        if old is None or new is None:
            found.append({"check": name, "change": "new" if old is None else "gone",
                          "recorded": None if old is None else old.get("passed"),
                          "now": None if new is None else new.get("passed")})
        elif old.get("passed") != new.get("passed"):
            found.append({"check": name, "change": "outcome", "recorded": old.get("passed"), "now": new.get("passed"),
                          "observed_recorded": old.get("observed"), "observed_now": new.get("observed")})
        elif old.get("observed") != new.get("observed"):
            found.append({"check": name, "change": "observed", "recorded": old.get("observed"),
                          "now": new.get("observed")})
    return found


def json_schema() -> dict[str, Any]:
    """schema/capture.schema.json: the manifest, recording and context of a capture file."""
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "sparkgate capture (gzip tar of manifest.json, recording.json, context.json)",
        "description": __doc__.split("\n\n")[0],
        **Capture.model_json_schema(),
    }
