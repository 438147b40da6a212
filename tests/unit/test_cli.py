"""The two command surfaces: invoke tasks on the host, the `sparkgate` console script in the stack's containers.
Exit codes and one-line errors, nothing written on refusal, and no command in both."""

from __future__ import annotations

import subprocess
import sys
import uuid

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


def test_every_console_command_an_image_runs_exists(repo):
    """The Dockerfiles run the console script at build time and as the entrypoint: each subcommand they name must be
    one it has (a removed one breaks the image build, which CI finds only when it builds)."""
    import json
    import re
    import shlex

    subcommands = set(cli.build_parser()._subparsers._group_actions[0].choices)
    named = []
    for dockerfile in (repo / "Dockerfile", *sorted((repo / "docker").glob("*.Dockerfile"))):
        for line in dockerfile.read_text().splitlines():
            if line.startswith("ENTRYPOINT ["):
                argv = json.loads(line.removeprefix("ENTRYPOINT "))
                named += [(dockerfile.name, argv[1])] if argv[0] == "sparkgate" else []
            elif not line.lstrip().startswith("#"):
                for match in re.finditer(r"(?:^RUN|&&)\s+sparkgate\s+(\S+)", line):
                    named.append((dockerfile.name, shlex.split(match.group(1))[0]))
    assert {name for _, name in named} >= {"engine", "build-guard"}, named
    assert [(f, name) for f, name in named if name not in subcommands and not name.startswith("-")] == []
