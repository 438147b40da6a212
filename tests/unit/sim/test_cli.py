"""The simulator refuses what `sglang serve` refuses (exit 2, argparse's message) and accepts the
shipped profiles' argv."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sparkgate_sim import cli, knobs, resolve
from tests.plugins.simproc import REPO, profile_launch

SHIPPED = ["baseline", "humming", "fp8-lm-head", "humming-fp8", "mtp", "all-three"]


def _run(argv: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sparkgate_sim", *argv], cwd=REPO, check=False, capture_output=True, text=True, timeout=30,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), **(env or {})},
    )


def test_unknown_flag_exits_2_like_argparse():
    result = _run(["--model-path", "/m", "--enable-fp8-lm-head", "--foo", "bar"])
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert lines[0].startswith("usage: sglang serve ")
    assert lines[-1] == "sglang serve: error: unrecognized arguments: --enable-fp8-lm-head --foo bar"
    assert result.stdout == ""


def test_bad_choice_exits_2():
    result = _run(["--model-path", "/m", "--moe-runner-backend", "hummingbird"])
    assert result.returncode == 2
    assert "sglang serve: error: argument --moe-runner-backend: invalid choice: 'hummingbird' (choose from " in result.stderr


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model-path", "/m", "--port", "abc"], "argument --port: invalid int value: 'abc'"),
        (["--model-path", "/m", "--port"], "argument --port: expected one argument"),
        (["--port", "1"], "the following arguments are required: --model-path/--model"),
        (["--model-path", "/m", "--enable-metrics=yes"], "argument --enable-metrics: ignored explicit argument 'yes'"),
        (["--model-path", "/m", "stray"], "unrecognized arguments: stray"),
    ],
)
def test_argparse_messages(argv, message):
    with pytest.raises(cli.UsageError) as caught:
        cli.parse_engine_argv(argv)
    assert str(caught.value) == message


def test_abbreviations_are_accepted_like_sglang_does():
    args = cli.parse_engine_argv(["--model-path", "/m", "--enable-fp32-lm"])
    assert args.get("enable_fp32_lm_head") is True


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_profiles_parse(name):
    argv, _ = profile_launch(name)
    args = cli.parse_engine_argv(argv)
    assert args.get("model_path") == "/models/Ling-3.0-flash-fp4"
    assert args.launch_command == " ".join(argv)


def test_unknown_speculative_algorithm_fails_resolution_with_exit_1():
    result = _run(["--model-path", "/m", "--speculative-algorithm", "MTP", "--port", "1"])
    assert result.returncode == 1
    assert "ValueError: Unknown speculative algorithm name: MTP" in result.stderr


def test_bad_knob_is_refused():
    result = _run(["--model-path", "/m"], {"SPARKGATE_SIM_FAULTS": "no-such-fault"})
    assert result.returncode == 2
    assert "unknown fault 'no-such-fault'" in result.stderr


def test_requested_follows_argv_and_env_only():
    argv, env = profile_launch("all-three")
    args = cli.parse_engine_argv(argv)
    req = resolve.requested(args, env)
    assert (req.humming, req.fp8_lm_head, req.mtp, req.cuda_graph) == (True, True, True, True)
    req = resolve.requested(args, {**env, "SGLANG_ENABLE_FP8_LM_HEAD": "0"})
    assert req.fp8_lm_head is False
    base = resolve.requested(cli.parse_engine_argv(profile_launch("baseline")[0]), {})
    assert (base.humming, base.fp8_lm_head, base.mtp, base.fp32_lm_head) == (False, False, False, True)


def test_nextn_resolves_like_sglang():
    resolved = resolve.resolve(cli.parse_engine_argv(["--model-path", "/m", "--speculative-algorithm", "nextn"]))
    assert resolved["speculative_algorithm"] == "EAGLE"
    assert (resolved["speculative_num_steps"], resolved["speculative_eagle_topk"], resolved["speculative_num_draft_tokens"]) == (3, 1, 4)
    assert resolved["speculative_draft_model_path"] is None  # BailingMoeV3 is not in SGLang's default list
    assert resolved["max_running_requests"] == 48  # SGLang's spec default without --max-running-requests
    forced = resolve.resolve(cli.parse_engine_argv(
        ["--model-path", "/m", "--speculative-algorithm", "EAGLE", "--speculative-num-steps", "2",
         "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "7"]))
    assert forced["speculative_num_draft_tokens"] == 3  # topk 1 forces steps + 1


def test_knobs_startup_phases():
    settings = knobs.from_env({"SPARKGATE_SIM_STARTUP_S": "100", "SPARKGATE_SIM_TIME_SCALE": "0.5"})
    with_draft = settings.phase_seconds(with_draft=True, slow=False)
    without = settings.phase_seconds(with_draft=False, slow=False)
    assert sum(with_draft.values()) == pytest.approx(100)
    assert sum(without.values()) == pytest.approx(100)
    assert "load_draft_weights" not in without
    assert sum(settings.phase_seconds(with_draft=True, slow=True).values()) == pytest.approx(1000)
    default = knobs.from_env({}).phase_seconds(with_draft=True, slow=False)
    assert default["load_weights"] == 342.0
    assert 7 * 60 < sum(default.values()) < 10 * 60  # a real Spark cold start with MTP
    with pytest.raises(knobs.KnobError):
        knobs.from_env({"SPARKGATE_SIM_TIME_SCALE": "0"})
    with pytest.raises(knobs.KnobError):
        knobs.from_env({"SPARKGATE_SIM_IMAGE": "nightly"})
