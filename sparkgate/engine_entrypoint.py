"""The engine container's entrypoint: a last guard, then SGLang (or the simulator) under a small
supervisor that copies its output to the shared log volume the gate reads.

The guard exists for hand-edited compose files and env files: the renderer already refuses the FP8 LM
head together with --enable-fp32-lm-head, but nothing else would stop `docker compose up` on an edited
file, and SGLang itself accepts the combination without a word.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from sparkgate import sglang_flags as F
from sparkgate.sglang_cli import resolve_spelling

LAUNCHERS = {
    "spark": ["-m", "sglang.launch_server"],
    "sim": ["-m", "sparkgate.sim"],
}
EXIT_REFUSED = 78  # EX_CONFIG


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
            f"sparkgate engine guard: refusing to start: {', '.join(fp8)} (FP8 LM head) together with "
            f"{', '.join(fp32)} (FP32 logits) - they are mutually exclusive. Likely cause: a hand-edited "
            "compose or env file. Fix: re-render with `invoke render --profile <name>` or remove one of them."
        )
    return None


def _rotate(log_file: Path) -> None:
    log_file.parent.mkdir(parents=True, exist_ok=True)
    if log_file.exists():
        os.replace(log_file, log_file.with_name(log_file.name + ".1"))


def run(launcher: str, log_file: Path | None, argv: list[str]) -> int:
    refusal = conflicting_lm_head(argv, os.environ)
    if refusal:
        print(refusal, file=sys.stderr, flush=True)
        return EXIT_REFUSED
    command = [sys.executable, *LAUNCHERS[launcher], *argv]
    if log_file is None:
        os.execv(sys.executable, command)
    _rotate(log_file)
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    def forward(signum, _frame):
        child.send_signal(signum)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, forward)
    with open(log_file, "ab", buffering=0) as sink:
        assert child.stdout is not None
        for line in iter(child.stdout.readline, b""):
            sys.stdout.buffer.write(line)
            sys.stdout.buffer.flush()
            sink.write(line)
    code = child.wait()
    # Killed by a signal (e.g. the OOM killer): report it as a shell would (128 + signal), not 256 - n.
    return 128 - code if code < 0 else code
