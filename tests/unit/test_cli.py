"""The console script and invoke tasks: exit codes and one-line errors, nothing written on refusal."""

from __future__ import annotations

import subprocess
import sys

from sparkgate import cli


def run_cli(*argv, cwd=None):
    return subprocess.run([sys.executable, "-m", "sparkgate", *argv], capture_output=True, text=True, cwd=cwd)


def test_user_profile_adding_fp32_is_refused_naming_both(tmp_path, repo):
    user = tmp_path / "mine.yaml"
    user.write_text("name: mine\ndescription: mine\nextends: [all-three]\nsglang:\n  extra_args: [--enable-fp32-lm-head]\n")
    out = tmp_path / "out"
    result = run_cli("render", "--profile", str(user), "--out", str(out))
    assert result.returncode == 1
    first = result.stderr.splitlines()[0]
    assert first.startswith(str(user))
    assert "optimizations.fp8_lm_head" in first and "--enable-fp32-lm-head" in first
    assert not out.exists(), "nothing is written on refusal"


def test_unknown_flag_is_refused(tmp_path):
    user = tmp_path / "mine.yaml"
    user.write_text("name: mine\ndescription: mine\nextends: [baseline]\nsglang:\n  extra_args: [--turbo]\n")
    result = run_cli("validate", "--profile", str(user))
    assert result.returncode == 1
    assert "unrecognized SGLang 0.5.23 argument '--turbo'" in result.stderr


def test_usage_error_exits_2():
    result = run_cli("render")
    assert result.returncode == 2


def test_render_all_three_to_a_directory(tmp_path):
    assert cli.main(["render", "--profile", "all-three", "--out", str(tmp_path / "b")]) == 0
    names = {p.name for p in (tmp_path / "b").iterdir()}
    assert {"argv.json", "compose.yaml", "engine-env.json", "expectations.json", "manifest.json", "haproxy.cfg"} <= names


def test_invoke_task_refusal_is_nonzero(tmp_path, repo):
    user = tmp_path / "mine.yaml"
    user.write_text("name: mine\ndescription: mine\nextends: [nope]\n")
    result = subprocess.run(
        [sys.executable, "-m", "invoke", "validate", "--profile", str(user)],
        capture_output=True, text=True, cwd=repo,
    )
    assert result.returncode != 0
    assert "unknown parent profile 'nope'" in result.stderr


def test_invoke_show_lists_argv_and_evidence(repo):
    result = subprocess.run(
        [sys.executable, "-m", "invoke", "show", "--profile", "all-three"], capture_output=True, text=True, cwd=repo
    )
    assert result.returncode == 0, result.stderr
    assert "--moe-runner-backend" in result.stdout and "min_accept_length=2.0" in result.stdout
