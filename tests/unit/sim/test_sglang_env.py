"""The simulator reads SGLang's environment as SGLang 0.5.23 does: EnvBool's strict vocabulary (an
invalid value warns and keeps the default) and the SGL_ -> SGLANG_ rewrite."""

from __future__ import annotations

import warnings

import pytest

from sparkgate_sim import sglang_env
from tests.plugins.simproc import profile_launch

VALUES = ("on", "off", "TRUE", "True", "y", "Y", "yes", "0", "1", "n", "no", "false", "enabled", "", " 1", "2")


@pytest.mark.parametrize(("raw", "expected"), [("on", None), ("TRUE", True), ("y", True), ("0", False), ("off", None)])
def test_parse_bool(raw, expected):
    if expected is None:
        with pytest.raises(sglang_env.InvalidBool, match="is not a valid boolean value"):
            sglang_env.parse_bool(raw)
    else:
        assert sglang_env.parse_bool(raw) is expected


def test_invalid_value_keeps_the_default_with_sglangs_warning():
    value, warning = sglang_env.read_bool({"SGLANG_X": "on"}, "SGLANG_X", default=False)
    assert value is False
    assert warning == 'Invalid value for SGLANG_X: "on" is not a valid boolean value, using default "False"'
    assert sglang_env.read_bool({"SGLANG_X": "on"}, "SGLANG_X", default=True) == (True, warning.replace('"False"', '"True"'))
    assert sglang_env.read_bool({}, "SGLANG_X", default=True) == (True, None)


@pytest.mark.sglang
@pytest.mark.parametrize("raw", VALUES)
def test_matches_sglangs_envbool(raw, monkeypatch):
    """Differential: SGLang's own EnvBool field, read from the process environment, against ours."""
    from sglang.srt.environ import EnvBool

    field = EnvBool(False)
    field.name = "SPARKGATE_TEST_ENVBOOL"
    monkeypatch.setenv(field.name, raw)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        theirs = field.get()
    ours, warning = sglang_env.read_bool({field.name: raw}, field.name)
    assert ours is theirs
    assert [str(w.message) for w in caught] == ([warning] if warning else [])


def test_legacy_prefix_is_rewritten_and_wins():
    env = sglang_env.with_legacy_names_rewritten({"SGL_ENABLE_FP8_LM_HEAD": "1", "SGLANG_ENABLE_FP8_LM_HEAD": "0"})
    assert env["SGLANG_ENABLE_FP8_LM_HEAD"] == "1" and env["SGL_ENABLE_FP8_LM_HEAD"] == "1"
    assert sglang_env.with_legacy_names_rewritten({"SGLANG_X": "a"}) == {"SGLANG_X": "a"}


def test_on_is_not_true_for_the_running_engine(start_sim):
    """`on` is no EnvBool value: the FP8 head stays BF16 and env_vars are not exposed."""
    argv, env = profile_launch("fp8-lm-head")
    sim = start_sim(argv, {**env, "SGLANG_ENABLE_FP8_LM_HEAD": "on", "SGLANG_EXPOSE_OWN_ENV_VARS": "on"})
    state = sim.server_info()["internal_states"][0]
    assert "env_vars" not in state
    assert state["engagement"]["target"]["lm_head"]["weight_dtype"] == "torch.bfloat16"
    assert "Online FP8 quantization enabled for lm_head." not in sim.log()
    assert 'Invalid value for SGLANG_ENABLE_FP8_LM_HEAD: "on" is not a valid boolean value' in sim.stderr()
    yes = start_sim(argv, {**env, "SGLANG_ENABLE_FP8_LM_HEAD": "Yes", "SGLANG_EXPOSE_OWN_ENV_VARS": "Y"})
    state = yes.server_info()["internal_states"][0]
    assert state["env_vars"]["SGLANG_ENABLE_FP8_LM_HEAD"] == "Yes"
    assert state["engagement"]["target"]["lm_head"]["weight_dtype"] == "torch.float8_e4m3fn"
