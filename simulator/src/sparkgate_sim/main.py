"""Entry point: validate like `sglang serve`, then start the HTTP server and the startup sequence."""

from __future__ import annotations

import os
import sys

from sparkgate_sim import cli, knobs
from sparkgate_sim.engine import Engine
from sparkgate_sim.http_app import make_server
from sparkgate_sim.image import engine_environment
from sparkgate_sim.logs import EngineLog
from sparkgate_sim.resolve import ResolutionError


def main(argv: list[str] | None = None, environ: dict[str, str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    env = dict(os.environ if environ is None else environ)
    log = EngineLog()
    try:
        settings = knobs.from_env(env)
    except knobs.KnobError as exc:
        sys.stderr.write(f"sparkgate_sim: {exc}\n")
        return 2
    try:
        # SGLang merges --config before parsing, and records the merged argv as launch_command.
        argv = cli.merge_config(argv)
    except cli.CONFIG_ERRORS as exc:
        log.traceback(
            "Traceback (most recent call last):\n"
            '  File "/sgl-workspace/sglang/python/sglang/srt/server_args.py", line 689, in prepare_server_args\n'
            "    argv = config_merger.merge_config_with_args(argv)\n"
            f"{'ValueError' if isinstance(exc, cli.ConfigFileError) else type(exc).__name__}: {exc}"
        )
        return 1
    try:
        args = cli.parse_engine_argv(argv)
    except cli.UsageError as exc:
        sys.stderr.write(cli.usage_error_text(exc))
        return 2
    try:
        engine = Engine(args, engine_environment(env), settings, log)
    except ResolutionError as exc:
        log.traceback(
            "Traceback (most recent call last):\n"
            '  File "/sgl-workspace/sglang/python/sglang/launch_server.py", line 32, in <module>\n'
            "    server_args.resolve_once()\n"
            f"ValueError: {exc}"
        )
        return 1
    host, port = engine.resolved["host"], int(engine.resolved["port"])
    try:
        server = make_server(engine, host, port)
    except OSError as exc:
        log.traceback(f"OSError: [Errno {exc.errno}] error while attempting to bind on address ({host!r}, {port}): {exc.strerror}")
        return 1
    if engine.meminfo is not None:
        engine.meminfo.start()
    engine.start()
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        if engine.meminfo is not None:
            engine.meminfo.write(released=True)
    return 0
