"""The operations both front ends offer: `sparkgate <command>` (sparkgate/cli.py, inside containers and CI)
and `invoke <task>` (sparkgate/tasks/). Each takes plain keyword arguments; a "no" is a Refusal."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from sparkgate import defaults
from sparkgate.errors import Refusal


class UsageError(Refusal):
    exit_code = 2


class StaleFile(Refusal):
    """A committed generated file differs from what the code generates now."""


class VerdictRefused(Refusal):
    """The engine's verdict did not pass (the verdict itself was printed above)."""


def _load(profile: str):
    from sparkgate.profile import loading as profiles
    return profiles.load(profile)


def validate(profile: str) -> None:
    loaded = _load(profile)
    print(f"{loaded.source}: valid ({', '.join(loaded.profile.requested()) or 'no optimizations'})")


def show(profile: str) -> None:
    from sparkgate import display
    loaded = _load(profile)
    out = display.console()
    for table in display.launch_tables(loaded):
        out.print(table)
    out.print(display.command_line(loaded))


def render_bundle(profile: str, target: str = "spark", out: str | None = None,
                  sim_time_scale: float = defaults.SIM_TIME_SCALE, dry_run: bool = False) -> None:
    from sparkgate.bundle import render
    loaded = _load(profile)
    options = render.RenderOptions(target=target, sim_time_scale=sim_time_scale)
    if dry_run:
        for name, text in render.render_files(loaded, options).items():
            print(f"--- {name} ({len(text)} bytes)")
        return
    written = render.render(loaded, options, Path(out) if out else None)
    print(f"rendered {loaded.source} for target {target} -> {written}")


def _sync(path: Path, text: str, check: bool, what: str, regenerate: str) -> None:
    from sparkgate.atomic import write_text_atomically

    if check:
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current != text:
            raise StaleFile(f"{path}: stale {what}; regenerate with `{regenerate}`")
        print(f"{path}: up to date")
        return
    write_text_atomically(path, text)
    print(f"wrote {path}")


def sync_schema(check: bool = False) -> None:
    from sparkgate.bundle import schema
    from sparkgate.evidence import capture

    _sync(schema.committed_schema_path(), schema.schema_text(), check, "profile schema", "invoke schema")
    _sync(schema.committed_schema_path().with_name("capture.schema.json"),
          json.dumps(capture.json_schema(), indent=2) + "\n", check, "capture schema", "invoke schema")


def sync_top_level(check: bool = False) -> None:
    from sparkgate.bundle import render
    from sparkgate.paths import repo_root

    for name, text in render.top_level_files(_load(render.TOP_LEVEL_PROFILE)).items():
        _sync(repo_root() / name, text, check, f"top-level {name}", "invoke render-top-level")


def sync_manifests(check: bool = False) -> None:
    from sparkgate.sglang import env as sglang_env
    from sparkgate.sglang import parser as sglang_parser

    manifest = sglang_parser.generate_manifest()
    if manifest["sglang_version"] != sglang_parser.SGLANG_VERSION:
        raise UsageError(f"installed sglang is {manifest['sglang_version']}, sparkgate pins "
                         f"{sglang_parser.SGLANG_VERSION}; install sglang=={sglang_parser.SGLANG_VERSION} first")
    data = resources.files("sparkgate.sglang.data")
    stale = []
    for path, text, what in (
        (Path(str(data.joinpath(sglang_parser.MANIFEST_RESOURCE))), sglang_parser.manifest_text(manifest), "SGLang CLI manifest"),
        (Path(str(data.joinpath(sglang_env.MANIFEST_RESOURCE))),
         sglang_env.manifest_text(sglang_env.generate_manifest()), "SGLang env manifest"),
    ):
        try:
            _sync(path, text, check, what, "invoke manifest")
        except StaleFile as exc:
            stale.append(str(exc))
    if stale:
        raise StaleFile("; ".join(stale))


def verify_engine(engine_url: str, *, profile: str | None = None, expectations_file: str | None = None,
                  target: str = "spark", time_scale: float | None = None, log_file: str | None = None,
                  container: str | None = None, api_key_file: str | None = None,
                  admin_key_file: str | None = None, calibrate: bool = True, json_out: str | None = None) -> None:
    """Gather evidence from a running engine and print the verdict; VerdictRefused unless it passed."""
    from sparkgate import display
    from sparkgate.bundle import expectations as expectations_mod
    from sparkgate.evidence import logs, verdict_view
    from sparkgate.evidence.verify import verify

    if bool(profile) == bool(expectations_file):
        raise UsageError("give exactly one of --profile or --expectations")
    if log_file and container:
        raise UsageError("give at most one of --log-file or --container")
    if expectations_file:
        try:
            expectations = json.loads(Path(expectations_file).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise UsageError(f"{expectations_file}: cannot read expectations: {exc}") from None
    else:
        scale = time_scale if time_scale is not None else (defaults.SIM_TIME_SCALE if target == "sim" else 1.0)
        expectations = expectations_mod.build(_load(profile), target, scale)
    if time_scale is not None:
        expectations["time_scale"] = time_scale
    log = logs.from_file(log_file) if log_file else logs.from_container(container) if container else logs.missing()
    try:
        api_key = Path(api_key_file).read_text().strip() if api_key_file else None
    except OSError as exc:
        raise UsageError(f"--api-key-file {api_key_file}: {exc.strerror or exc}") from None
    out = display.console()
    verdict = verify(engine_url, expectations, log, api_key=api_key, admin_key_file=admin_key_file, calibrate=calibrate,
                     progress=lambda message: out.print(f"[dim]{message}[/dim]"))
    verdict_view.print_verdict(verdict, out)
    if json_out:
        verdict_view.write_json(verdict, Path(json_out))
    if not verdict.passed:
        failing = ", ".join(check.name for check in verdict.failures())
        raise VerdictRefused(f"not proven: {failing}")


def replay_capture(path: str, json_out: str | None = None, **live: object) -> None:
    """Judge a capture again with the current code, no engine: the verdict, then what changed per check against the
    recorded one. VerdictRefused unless the verdict passes (exit codes as `verify`). `live`: verify's options
    for a live engine, by name (engine_url=...), each refused when given: a capture is judged alone."""
    given = [f"--{name.replace('_', '-')}" for name, value in live.items() if value is not None and value is not False]
    if given:
        raise UsageError(f"--replay judges a capture file alone: drop {', '.join(given)}")
    from rich.text import Text

    from sparkgate import display
    from sparkgate.evidence import capture, verdict_view
    from sparkgate.evidence.recording import ReplayMismatch

    captured = capture.read(path)
    manifest, out = captured.manifest, display.console()
    hosts = ", ".join(f"{h.source} {h.arch}" + (f" ({h.gpu})" if h.gpu else "") for h in captured.context.hosts)
    out.print(Text(verdict_view.inert(f"capture {path}: profile {manifest.profile}, written {manifest.created} by the {manifest.written_by} "
                   f"(sparkgate {manifest.sparkgate.version}, commit {manifest.sparkgate.commit or 'unknown'}); "
                   f"recorded verdict {'PASS' if manifest.passed else 'FAIL'}; hosts: {hosts or 'none'}")))
    if manifest.log_cut_bytes:
        out.print(Text(f"the engine log was cut ({manifest.log_cut_bytes} bytes left out of its middle): a log check "
                       "that counted lines there may judge differently"))
    if captured.context.start is not None:
        start = captured.context.start
        out.print(Text(verdict_view.inert(
            f"a start refused before any verification: the engine exited (code {start.exit_code}) after reaching "
            f"{', '.join(start.phases_reached) or 'no startup phase'}; it never reached "
            f"{', '.join(start.never_reached) or 'nothing missing'}; {len(start.host_memory)} host memory reading(s) "
            "over the start")))
    try:
        again = capture.rejudge(captured)
        found = capture.changes(captured.recording.verdict, again.as_dict())
    except ReplayMismatch as exc:
        raise capture.CaptureRefused(f"capture {path}: cannot be judged again by this sparkgate: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - a capture is untrusted input: what it breaks is named, never a traceback
        raise capture.CaptureRefused(
            f"capture {path}: its recorded evidence does not fit this sparkgate's checks ({type(exc).__name__}: "
            f"{str(exc)[:160]}); a damaged or hand-made capture") from None
    verdict_view.print_verdict(again, out)
    if not found:
        out.print(Text("unchanged: every check judges the recorded evidence as it did when captured"))
    shown_changes = 50
    if len(found) > shown_changes:
        out.print(Text(f"{len(found)} checks changed; the first {shown_changes}:"))
    for change in found[:shown_changes]:
        out.print(Text(verdict_view.inert(f"changed {change['check']} ({change['change']}): recorded "
                                    f"{json.dumps(change['recorded'], default=str)[:300]}, now "
                                    f"{json.dumps(change['now'], default=str)[:300]}")))
    if json_out:
        from sparkgate.atomic import write_text_atomically

        write_text_atomically(Path(json_out), json.dumps({**again.as_dict(), "changes": found}, indent=1,
                                                         default=str) + "\n")
    if not again.passed:
        health = next((c.observed for c in again.checks if c.name == "engine.health" and not c.passed), None)
        never = (f"; the start never reached {', '.join(map(str, health.get('never_reached') or [])) or 'nothing'}"
                 if captured.context.start is not None and isinstance(health, dict) else "")
        raise VerdictRefused(verdict_view.inert("not proven (replayed): " + ", ".join(c.name for c in again.failures())
                                          + never))
    if captured.manifest.gate_passed is False:
        # What the sentinel also weighed and a replay cannot re-judge: the suites, a carried cold refusal.
        suites = captured.context.suites
        why = [name for name in ("infra", "smoke") if isinstance(suites.get(name), dict)
               and suites[name].get("passed") is not True]
        if isinstance(suites.get("gate"), dict) and suites["gate"].get("cold_refusal_kept"):
            why.append("answers.cold_prefill carried from this engine start's first verification")
        raise VerdictRefused("the verification passes on replay, but the gate refused this engine: "
                             + (", ".join(why) or "see context.json suites") + " (not re-judged offline)")


def sync_checks_catalog(check: bool = False) -> None:
    """The check catalog table in docs/checks/README.md, generated from every module's declared checks."""
    from sparkgate.evidence import catalog

    _sync(catalog.README, catalog.with_catalog(catalog.README.read_text(encoding="utf-8")), check,
          "check catalog", "invoke checks-catalog")
