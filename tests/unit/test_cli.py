"""The two command surfaces: invoke tasks on the host, the `sparkgate` console script in the stack's containers.
Exit codes and one-line errors, nothing written on refusal, and no command in both."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

from sparkgate import cli, commands


def run_invoke(repo, *argv):
    return subprocess.run([sys.executable, "-m", "invoke", *argv], capture_output=True, text=True, cwd=repo)


def test_user_profile_adding_fp32_is_refused_naming_both_and_nothing_is_written(tmp_path, repo):
    name = f"fp32-on-top-{uuid.uuid4().hex[:8]}"  # its own build/<name>: nothing an earlier run left can be there
    user = tmp_path / f"{name}.yaml"
    user.write_text(f"name: {name}\ndescription: mine\nextends: [all-three]\nsglang:\n"
                    "  extra_args: [--enable-fp32-lm-head]\n")
    result = run_invoke(repo, "render", "--profile", str(user))
    assert result.returncode == 1
    first = result.stderr.splitlines()[0]
    assert first.startswith(str(user))
    assert "optimizations.fp8_lm_head" in first and "--enable-fp32-lm-head" in first
    assert not (repo / "build" / name).exists(), "nothing is written on refusal"


def test_unknown_flag_is_refused(tmp_path, repo):
    user = tmp_path / "mine.yaml"
    user.write_text("name: mine\ndescription: mine\nextends: [baseline]\nsglang:\n  extra_args: [--turbo]\n")
    result = run_invoke(repo, "validate", "--profile", str(user))
    assert result.returncode == 1
    assert "unrecognized SGLang 0.5.23 argument '--turbo'" in result.stderr


def test_console_script_usage_error_exits_2():
    result = subprocess.run([sys.executable, "-m", "sparkgate", "verify"], capture_output=True, text=True)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_no_command_is_both_an_invoke_task_and_a_console_subcommand():
    import tasks as root  # the repo's tasks.py

    subcommands = set(cli.build_parser()._subparsers._group_actions[0].choices)
    assert subcommands == {"engine", "healthcheck", "build-guard", "verify", "sentinel", "gateway"}
    assert not subcommands & set(root.ns.task_names)


def test_render_all_three_to_a_directory(tmp_path):
    commands.render_bundle("all-three", out=str(tmp_path / "b"))
    names = {p.name for p in (tmp_path / "b").iterdir()}
    assert {"argv.json", "compose.yaml", "engine-env.json", "expectations.json", "manifest.json", "haproxy.cfg"} <= names


def test_invoke_task_refusal_is_nonzero(tmp_path, repo):
    user = tmp_path / "mine.yaml"
    user.write_text("name: mine\ndescription: mine\nextends: [nope]\n")
    result = run_invoke(repo, "validate", "--profile", str(user))
    assert result.returncode != 0
    assert "unknown parent profile 'nope'" in result.stderr


def test_invoke_show_lists_argv_and_evidence(repo):
    result = run_invoke(repo, "show", "--profile", "all-three")
    assert result.returncode == 0, result.stderr
    assert "--moe-runner-backend" in result.stdout and "min_accept_length=2.0" in result.stdout


def _console_argvs(text: str) -> list[list[str]]:
    """Every `sparkgate ...` command line a Dockerfile runs: in RUN, CMD, ENTRYPOINT and HEALTHCHECK, exec-form arrays
    and shell commands (split at && || ; | and cut at a redirection), wherever the program is the console script."""
    import json
    import shlex

    found = []
    for instruction in text.replace("\\\n", " ").splitlines():
        keyword, _, rest = instruction.strip().partition(" ")
        if keyword not in ("RUN", "CMD", "ENTRYPOINT", "HEALTHCHECK"):
            continue
        rest = rest.strip().removeprefix("CMD ").strip() if keyword == "HEALTHCHECK" else rest.strip()
        if rest.startswith("["):
            words = json.loads(rest)
        else:
            lexer = shlex.shlex(rest, posix=True, punctuation_chars=True)  # && || ; | > as words of their own
            lexer.whitespace_split = True
            words = list(lexer)
        command: list[str] | None = []
        for word in [*words, ";"]:
            if word in ("&&", "||", ";", "|"):
                found += [command] if command else []
                command = []  # the next word is a program
            elif word.startswith((">", "<")):
                found += [command] if command else []
                command = None  # the rest up to the next separator is not the command's
            elif command == [] and Path(word).name == "sparkgate" or command:
                command.append(word)
            elif command == []:
                command = None  # another program
    return found


def test_every_console_command_the_images_and_the_stack_run_parses(repo):
    """The Dockerfiles run the console script at build time and as the entrypoint, the rendered stack as entrypoints
    and healthchecks: each must parse with the script's own parser (a removed subcommand or option breaks the image
    build or the stack, which CI finds only when it builds or deploys)."""
    import yaml

    from sparkgate.bundle import render
    from sparkgate.profile import loading

    argvs = [a for f in (repo / "Dockerfile", *sorted((repo / "docker").glob("*.Dockerfile")))
             for a in _console_argvs(f.read_text())]
    for target in render.TARGETS:
        compose = yaml.safe_load(render.render_files(loading.load("all-three"), render.RenderOptions(target=target))[
            "compose.yaml"])
        for service in compose["services"].values():
            argvs += [service["entrypoint"]] if service.get("entrypoint", [None])[0] == "sparkgate" else []
            test = (service.get("healthcheck") or {}).get("test") or []
            argvs += [test[1:]] if test[:2] == ["CMD", "sparkgate"] else []
    assert {a[1] for a in argvs} >= {"engine", "build-guard", "sentinel", "gateway", "healthcheck", "--help"}, argvs
    parser = cli.build_parser()
    for argv in argvs:
        if "--help" not in argv:
            parser.parse_args(argv[1:])  # exits 2, naming the word, on anything the script does not take


def test_the_scan_finds_what_a_dockerfile_can_run():
    text = 'RUN true && sparkgate nope --x 1 \\\n || /opt/venv/bin/sparkgate two\nCMD ["sparkgate", "three"]\n' \
           'HEALTHCHECK CMD sparkgate four; echo\n# RUN sparkgate five\n'
    assert _console_argvs(text) == [["sparkgate", "nope", "--x", "1"], ["/opt/venv/bin/sparkgate", "two"],
                                    ["sparkgate", "three"], ["sparkgate", "four"]]
