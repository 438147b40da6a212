"""`sparkgate` console script: what runs inside the stack's containers or with no invoke (`sparkgate verify`, the
entrypoints, the image's build guard). Everything run on the host is an invoke task (sparkgate/tasks), and no command
is both."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sparkgate import defaults
from sparkgate.errors import run_cli

EXIT_INVALID = 1
EXIT_USAGE = 2


def cmd_engine(args: argparse.Namespace) -> int:
    from sparkgate.runtime import engine_entrypoint

    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    return engine_entrypoint.run(args.launcher, Path(args.log_file) if args.log_file else None, argv,
                                 preflight_file=Path(args.preflight) if args.preflight is not None else None)


def cmd_healthcheck(args: argparse.Namespace) -> int:
    from sparkgate.runtime import healthcheck

    return healthcheck.check(args.url, args.timeout)


def cmd_build_guard(args: argparse.Namespace) -> int:
    from sparkgate.sglang import build_guard

    results = build_guard.run_all(args.image)
    for result in results:
        print(f"[{'ok' if result.ok else 'MISSING'}] {result.name}: {result.detail}", flush=True)
    refusal = build_guard.refusal(results)
    if refusal is None:
        return 0
    print(refusal, file=sys.stderr)
    return EXIT_INVALID


def cmd_verify(args: argparse.Namespace) -> int:
    from sparkgate import commands  # not at import: the healthcheck runs this script every few seconds per container

    if args.replay:
        commands.replay_capture(args.replay, json_out=args.json, engine_url=args.engine_url, profile=args.profile,
                                expectations=args.expectations, log_file=args.log_file, container=args.container,
                                time_scale=args.time_scale, api_key_file=args.api_key_file,
                                admin_key_file=args.admin_key_file, no_calibrate=args.no_calibrate)
        return 0
    if not args.engine_url:
        raise commands.UsageError("give --engine-url (a live engine) or --replay FILE (a capture)")
    commands.verify_engine(
        args.engine_url, profile=args.profile, expectations_file=args.expectations, target=args.target,
        time_scale=args.time_scale, log_file=args.log_file, container=args.container,
        api_key_file=args.api_key_file, admin_key_file=args.admin_key_file, calibrate=not args.no_calibrate,
        json_out=args.json,
    )
    return 0


def cmd_sentinel(args: argparse.Namespace) -> int:
    import logging

    from sparkgate.sentinel.service import Sentinel, SentinelConfig

    logging.basicConfig(level=logging.INFO, format="%(asctime)s sentinel %(levelname)s %(message)s")
    config = SentinelConfig(
        engine_url=args.engine_url,
        bundle_dir=Path(args.bundle),
        log_file=args.log_file,
        period_s=args.period,
        port=args.port,
        closed_port=args.closed_port,
        api_key_file=args.api_key_file,
        meminfo_path=args.meminfo,
        captures_dir=args.captures or None,
    )
    if not (config.bundle_dir / "expectations.json").is_file():
        print(f"sparkgate sentinel: {config.bundle_dir}/expectations.json missing: mount the rendered bundle", file=sys.stderr)
        return EXIT_USAGE
    Sentinel(config).run_forever()
    return 0


def cmd_gateway(args: argparse.Namespace) -> int:
    from sparkgate.runtime import gateway

    return gateway.run(args.config)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sparkgate", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    engine = sub.add_parser("engine", help="container entrypoint: guard, then run the engine")
    engine.add_argument("--launcher", choices=["spark", "sim"], required=True)
    engine.add_argument("--log-file")
    engine.add_argument("--preflight", metavar="FILE", help="the host checks to pass before the engine starts "
                        "(the bundle's preflight.json; Spark only)")
    engine.add_argument("argv", nargs=argparse.REMAINDER)
    engine.set_defaults(func=cmd_engine)
    health = sub.add_parser("healthcheck", help="exit 0 if URL answers 200")
    health.add_argument("--url", required=True)
    health.add_argument("--timeout", type=float, default=5.0)
    health.set_defaults(func=cmd_healthcheck)
    guard = sub.add_parser("build-guard", help="fail unless the installed SGLang is the fork the profiles need")
    guard.add_argument("--image", default="spark-fork", help="engine image key in images.lock.yaml")
    guard.set_defaults(func=cmd_build_guard)
    verify_p = sub.add_parser("verify", help="prove from runtime evidence that the profile's optimizations engaged")
    verify_p.add_argument("--profile", help="profile name or YAML path (expectations built from it)")
    verify_p.add_argument("--expectations", help="a rendered expectations.json instead of --profile")
    verify_p.add_argument("--target", choices=["spark", "sim"], default="spark")
    verify_p.add_argument("--engine-url", help="the engine itself, e.g. http://127.0.0.1:30000")
    verify_p.add_argument("--replay", metavar="FILE", help="judge a capture file again with this sparkgate, no engine "
                          "(docs/field-reports.md); prints what changed per check against the recorded verdict")
    verify_p.add_argument("--log-file", help="engine log file")
    verify_p.add_argument("--container", help="read the engine log with `docker logs CONTAINER`")
    verify_p.add_argument("--json", help="write the verdict JSON here (atomically)")
    verify_p.add_argument("--time-scale", type=float, help="simulator time scale (engine time per wall second)")
    verify_p.add_argument("--api-key-file", help="file holding the engine's API key, if it has one")
    verify_p.add_argument("--admin-key-file", help="file holding the engine's SGLang admin key: adds the check that "
                          "the engine enforces it (engine.admin_key_enforced)")
    verify_p.add_argument("--no-calibrate", action="store_true", help="skip the answers and calibration: a cheap look that can never pass (answers, calibration, CUDA-graph passes, speed and accept checks fail)")
    verify_p.set_defaults(func=cmd_verify)
    sentinel = sub.add_parser("sentinel", help="run the admission sentinel (inside the stack)")
    sentinel.add_argument("--engine-url", required=True)
    sentinel.add_argument("--bundle", default="/bundle", help="rendered bundle directory (expectations.json, argv.json)")
    sentinel.add_argument("--log-file", default="/var/log/sparkgate/engine.log")
    sentinel.add_argument("--period", type=float, default=defaults.RECHECK_PERIOD_S, help="seconds between re-checks")
    sentinel.add_argument("--port", type=int, default=defaults.SENTINEL_PORT)
    sentinel.add_argument("--closed-port", type=int, default=defaults.SENTINEL_CLOSED_PORT)
    sentinel.add_argument("--api-key-file", help="the engine's API key, if it has one")
    sentinel.add_argument("--meminfo", default="/proc/meminfo",
                          help="the host's meminfo (inside a container /proc/meminfo shows the host's figures)")
    sentinel.add_argument("--captures", default="", help="directory for each full verification's capture file "
                          "(the last, and the last refused ones; empty: none)")
    sentinel.set_defaults(func=cmd_sentinel)
    gateway_p = sub.add_parser("gateway", help="gateway container entrypoint (API key, then HAProxy)")
    gateway_p.add_argument("--config", required=True)
    gateway_p.set_defaults(func=cmd_gateway)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_cli(lambda: args.func(args), prefix=f"sparkgate {args.command}")


if __name__ == "__main__":
    sys.exit(main())
