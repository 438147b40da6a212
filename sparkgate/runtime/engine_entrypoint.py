"""The engine container's entrypoint: a last guard, a fresh admin key, then SGLang (or the simulator)
under a small supervisor that copies its output, with the key redacted, to the shared log volume the
gate reads.

The guard exists for hand-edited compose files and env files: the renderer already refuses the FP8 LM
head together with --enable-fp32-lm-head, and secrets or a --config on the argv, but nothing else would
stop `docker compose up` on an edited file, and SGLang itself accepts all of them without a word.

Beside the log it leaves the start's records (sparkgate.runtime.engine_run): engine-start.json when the engine
starts, engine-exit.json (code or signal, the startup phases reached) when it exits, so the sentinel can capture
a start that died before it was ready.

The admin key (sparkgate.runtime.admin_key) reaches the engine only through `--config <file on tmpfs>`: the
argv, the environment and every rendered file stay free of it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from pydantic import ValidationError

from sparkgate.runtime import admin_key, engine_run
from sparkgate.runtime.secret_files import SecretFileError
from sparkgate.sglang import flags as F
from sparkgate.sglang.parser import resolve_spelling
from sparkgate.sglang.phases import PhaseTracker

# Module names, never imports: the simulator is its own distribution (simulator/), installed only in
# the runtime image and the dev venv, and the product must not depend on it.
LAUNCHERS = {
    "spark": ["-m", "sglang.launch_server"],
    "sim": ["-m", "sparkgate_sim"],
}
REFUSED = "sparkgate engine guard: refusing to start"
# Flags the entrypoint owns or that would put a secret on the argv (and in /proc/<pid>/cmdline). An
# --admin-api-key on the argv would also beat the config file's key (SGLang: CLI > config), and SGLang
# refuses a second --config.
RESERVED_FLAGS = (*F.SECRET_FLAGS, F.CONFIG)


def conflicting_lm_head(argv: Sequence[str], environ: Mapping[str, str]) -> str | None:
    """A one-line refusal if the FP8-head env and the fp32 flag meet, else None.

    The env counts exactly when SGLang would read it as true: after its SGL_* -> SGLANG_* rewrite (the
    legacy name wins) and through EnvBool (`on` is invalid there, so SGLang keeps the False default).
    """
    effective = F.sglang_environ(environ).get(F.FP8_LM_HEAD_ENV)
    fp8 = []
    if effective is not None and F.env_is_true(effective):
        fp8 = sorted(f"{name}={value}" for name, value in environ.items()
                     if F.canonical_env_name(name) == F.FP8_LM_HEAD_ENV)
        if fp8 != [f"{F.FP8_LM_HEAD_ENV}={effective}"]:
            fp8.append(f"which SGLang reads as {F.FP8_LM_HEAD_ENV}={effective}")
    fp32 = []
    for token in argv:
        if token.startswith("--"):
            spec, _ = resolve_spelling(token.partition("=")[0])
            if spec is not None and spec.option == F.ENABLE_FP32_LM_HEAD:
                fp32.append(token)
    if fp8 and fp32:
        return (
            f"{REFUSED}: {', '.join(fp8)} (FP8 LM head) together with "
            f"{', '.join(fp32)} (FP32 logits) - they are mutually exclusive. Likely cause: a hand-edited "
            "compose or env file. Fix: re-render with `invoke render --profile <name>` or remove one of them."
        )
    return None


def reserved_flags(argv: Sequence[str]) -> str | None:
    """A one-line refusal if the argv carries a flag the entrypoint reserves (any spelling SGLang's
    parser would expand to it), else None. Values are never echoed: they may be secrets."""
    found = []
    for token in argv:
        if token.startswith("--"):
            written = token.partition("=")[0]
            spec, _ = resolve_spelling(written)
            if spec is not None and spec.option in RESERVED_FLAGS:
                found.append(f"{written} ({spec.option})" if written != spec.option else written)
    if not found:
        return None
    return (
        f"{REFUSED}: {', '.join(found)} on the engine's command line - a secret "
        "there is readable in /proc and `docker inspect`, and the admin key and its --config file belong to "
        "this entrypoint. Likely cause: a hand-edited compose file. Fix: remove the flag; the gateway takes "
        "the API key from a file (`invoke deploy --api-key-file FILE`)."
    )


def _rotate(log_file: Path) -> None:
    log_file.parent.mkdir(parents=True, exist_ok=True)
    if log_file.exists():
        os.replace(log_file, log_file.with_name(log_file.name + ".1"))


def run(launcher: str, log_file: Path | None, argv: list[str], admin_dir: Path = admin_key.ADMIN_DIR,
        mountinfo: str | None = None, preflight_file: Path | None = None) -> int:
    refusal = conflicting_lm_head(argv, os.environ) or reserved_flags(argv)
    if refusal is None and preflight_file is not None:
        # `docker compose up` on a Spark runs no `invoke deploy`: the host checks happen here, before a byte loads.
        from sparkgate.deploy import engine_preflight

        refusal = engine_preflight.refusal(preflight_file)
    if refusal is None:
        try:
            key, config = admin_key.install(admin_dir, mountinfo)
        except SecretFileError as exc:
            refusal = str(exc)  # already one line: path, filesystem, cause, fix
        except OSError as exc:
            refusal = (f"{REFUSED}: cannot write the admin key under {admin_dir}: {exc.strerror or exc}. Fix: "
                       "re-render the bundle, whose compose file mounts a tmpfs volume there")
    if refusal is not None:
        return _refuse(refusal, log_file, argv)
    # Only the config file's path is on the argv; SGLang merges its keys only for exactly `--config PATH`.
    command = [sys.executable, *LAUNCHERS[launcher], *argv, "--config", str(config)]
    start = None
    if log_file is not None:
        _rotate(log_file)
        start = _record_start(log_file.parent, argv)
    tracker = PhaseTracker()
    # Never exec straight into the engine: SGLang prints the key (server_args=...), so every line passes here.
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda received, _frame: child.send_signal(received))
    with open(log_file if log_file is not None else os.devnull, "ab", buffering=0) as sink:
        assert child.stdout is not None
        for line in iter(child.stdout.readline, b""):
            clean = redact_line(line, key)
            sys.stdout.buffer.write(clean)
            sys.stdout.buffer.flush()
            sink.write(clean)
            tracker.feed(clean.decode("utf-8", "replace"))
    code = child.wait()
    if start is not None:
        _record_exit(log_file.parent, start, code, tracker.reached)
    # Killed by a signal (e.g. the OOM killer): report it as a shell would (128 + signal), not 256 - n.
    return 128 - code if code < 0 else code


def _refuse(line: str, log_file: Path | None, argv: list[str]) -> int:
    """Every refusal before SGLang starts: one line on stderr and, with a log file, this start's own records (a start
    record, the line as the log, an exit record of EXIT_REFUSED, no phase), so the sentinel judges and captures
    this refused start, never the previous one's (engine_run)."""
    print(line, file=sys.stderr, flush=True)
    if log_file is not None:
        _rotate(log_file)
        start = _record_start(log_file.parent, argv)
        with open(log_file, "ab") as sink:
            sink.write(line.encode("utf-8", "replace") + b"\n")
        if start is not None:
            _record_exit(log_file.parent, start, engine_run.EXIT_REFUSED, [])
    return engine_run.EXIT_REFUSED


def _record_start(directory: Path, argv: list[str]) -> engine_run.EngineRun | None:
    """engine-start.json for this start; a previous start's engine-exit.json is removed first, so it can never be
    read as this one's. A record that cannot be made (a hostname the record refuses) or written costs the capture
    its identity, never the start: None then, and no exit record either."""
    try:
        (directory / engine_run.EXIT_FILE).unlink(missing_ok=True)
        record = engine_run.EngineRun(container=engine_run.this_container(), started=engine_run.now(),
                                      argv_sha256=engine_run.argv_sha256(argv))
        engine_run.write(directory / engine_run.START_FILE, record)
    except (OSError, ValidationError) as exc:
        why = exc.strerror or exc if isinstance(exc, OSError) else f"not a record ({exc.error_count()} field(s) refused)"
        print(f"sparkgate engine: cannot write {directory / engine_run.START_FILE}: {why}; the engine starts without "
              "it (a start that dies is then not captured by the sentinel)", file=sys.stderr, flush=True)
        return None
    return record


def _record_exit(directory: Path, start: engine_run.EngineRun, code: int, phases: list[str]) -> None:
    name = None
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
    record = start.model_copy(update={"exit_code": 128 - code if code < 0 else code, "signal": name,
                                      "exited": engine_run.now(), "phases": list(phases)})
    try:
        engine_run.write(directory / engine_run.EXIT_FILE, engine_run.EngineRun.model_validate(record.model_dump()))
    except (OSError, ValidationError) as exc:
        why = exc.strerror or exc if isinstance(exc, OSError) else f"not a record ({exc.error_count()} field(s) refused)"
        print(f"sparkgate engine: cannot write {directory / engine_run.EXIT_FILE}: {why}", file=sys.stderr, flush=True)


def redact_line(line: bytes, key: str) -> bytes:
    """One line of engine output with the admin key (and any secret flag's value) replaced."""
    text = line.decode("utf-8", "surrogateescape")
    return admin_key.redact_text(text, (key,)).encode("utf-8", "surrogateescape")
