"""Cross-field rules, exercised on profiles written on the fly (tmp_path)."""

from __future__ import annotations

import textwrap

import pytest

from sparkgate import profiles
from sparkgate.problems import ProfileError


def write(tmp_path, name, body):
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"name: {name}\ndescription: test profile\n" + textwrap.dedent(body))
    return str(path)


def refusal(reference) -> str:
    with pytest.raises(ProfileError) as refused:
        profiles.load(reference)
    return str(refused.value)


@pytest.mark.parametrize(
    "fp32_spelling",
    ["--enable-fp32-lm-head", "--enable-fp32-lm", "--enable-fp32", "--enable-fp32-lm-head=1"],
)
def test_fp32_in_any_spelling_conflicts_with_fp8_head(tmp_path, fp32_spelling):
    ref = write(tmp_path, "user", f"extends: [all-three]\nsglang:\n  extra_args: [{fp32_spelling!r}]\n")
    message = refusal(ref)
    conflict = [line for line in message.splitlines() if "mutually exclusive" in line]
    assert len(conflict) == 1
    assert "optimizations.fp8_lm_head" in conflict[0] and "sglang.extra_args[0]" in conflict[0]
    assert conflict[0].startswith(ref)


@pytest.mark.parametrize("base", ["baseline", "all-three"])
@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("SGLANG_ENABLE_FP8_LM_HEAD", "1"),
        ("SGLANG_ENABLE_FP8_LM_HEAD", "0"),  # would switch the head off unseen on all-three
        ("SGLANG_ENABLE_FP8_LM_HEAD", "on"),
        ("SGL_ENABLE_FP8_LM_HEAD", "0"),  # SGLang's SGL_ rewrite overwrites the rendered SGLANG_ value
        ("SGL_ENABLE_FP8_LM_HEAD", "1"),
    ],
)
def test_fp8_env_is_owned_in_any_spelling_and_value(tmp_path, base, name, value):
    ref = write(tmp_path, "user", f"extends: [{base}]\nenv:\n  {name}: {value!r}\n")
    message = refusal(ref)
    assert f"env.{name}" in message
    assert "managed by optimizations.fp8_lm_head" in message and "whatever the value" in message


def test_legacy_prefix_is_refused_with_its_rewrite(tmp_path):
    ref = write(tmp_path, "user", "extends: [baseline]\nenv:\n  SGL_LOG_GC: '1'\n")
    message = refusal(ref)
    assert "SGLang rewrites SGL_LOG_GC to SGLANG_LOG_GC" in message and "write it as SGLANG_LOG_GC" in message


def test_stock_image_refuses_fp8_head_alone(tmp_path):
    ref = write(tmp_path, "user", "extends: [fp8-lm-head]\nimage: sglang-stock\n")
    assert "does not declare SGLANG_ENABLE_FP8_LM_HEAD" in refusal(ref)


def test_stock_image_is_fine_without_fork_features(tmp_path):
    ref = write(tmp_path, "user", "extends: [mtp]\nimage: sglang-stock\n")
    assert profiles.load(ref).profile.image == "sglang-stock"


def test_unknown_image(tmp_path):
    ref = write(tmp_path, "user", "extends: [baseline]\nimage: nightly\n")
    assert "unknown engine image 'nightly'" in refusal(ref)


def test_token_map_breaks_module_sharing(tmp_path):
    ref = write(tmp_path, "user", "extends: [all-three]\nsglang:\n  extra_args: ['--speculative-token-map', '/x.pt']\n")
    assert "--speculative-token-map makes SGLang skip" in refusal(ref)


def test_disable_cuda_graph_refused(tmp_path):
    ref = write(tmp_path, "user", "extends: [baseline]\nsglang:\n  extra_args: ['--disable-cuda-graph']\n")
    assert "CUDA graphs are off" in refusal(ref)


def test_stray_value_names_field(tmp_path):
    ref = write(tmp_path, "user", "extends: [baseline]\nsglang:\n  extra_args: ['oops']\n")
    assert "sglang.extra_args[0]: stray value 'oops'" in refusal(ref)


def test_missing_description(tmp_path):
    path = tmp_path / "user.yaml"
    path.write_text("name: user\nextends: [baseline]\n")
    assert "description: missing" in refusal(str(path))


def test_list_values_replace_not_concatenate(tmp_path):
    parent = write(tmp_path, "parent", "extends: [baseline]\nsglang:\n  extra_args: ['--log-requests']\n")
    child = write(tmp_path, "child", f"extends: [{parent!r}]\nsglang:\n  extra_args: ['--enable-cache-report']\n")
    argv = profiles.load(child).plan.argv
    assert "--enable-cache-report" in argv and "--log-requests" not in argv


def test_model_is_frozen():
    loaded = profiles.load("baseline")
    with pytest.raises(Exception):
        loaded.profile.name = "x"  # type: ignore[misc]
