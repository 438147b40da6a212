"""Cross-field rules, exercised on profiles written on the fly (tmp_path)."""

from __future__ import annotations

import textwrap

import pytest
from pydantic import ValidationError

from sparkgate.profile import loading as profiles
from sparkgate.profile.problems import ProfileError
from sparkgate.sglang import env as sglang_env
from sparkgate.sglang import flags as F


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


def test_two_line_overlay_takes_its_name_from_the_file(tmp_path):
    path = tmp_path / "cooler.yaml"
    path.write_text("extends: [all-three]\nsglang:\n  mem_fraction_static: 0.6\n")
    loaded = profiles.load(str(path))
    assert loaded.profile.name == "cooler"
    assert loaded.profile.description == "cooler: all-three with the changes in cooler.yaml"
    assert loaded.profile.sglang.mem_fraction_static == 0.6 and loaded.profile.requested() == ["humming", "fp8_lm_head", "mtp"]


def test_a_present_name_must_still_match_the_file(tmp_path):
    path = tmp_path / "cooler.yaml"
    path.write_text("name: warmer\nextends: [all-three]\n")
    assert "set name: cooler" in refusal(str(path))


def test_list_values_replace_not_concatenate(tmp_path):
    parent = write(tmp_path, "parent", "extends: [baseline]\nsglang:\n  extra_args: ['--log-requests']\n")
    child = write(tmp_path, "child", f"extends: [{parent!r}]\nsglang:\n  extra_args: ['--enable-cache-report']\n")
    argv = profiles.load(child).plan.argv
    assert "--enable-cache-report" in argv and "--log-requests" not in argv


def test_model_is_frozen():
    loaded = profiles.load("baseline")
    with pytest.raises(ValidationError, match="frozen"):
        loaded.profile.name = "x"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--load-format", "dummy"], "--load-format is refused: it changes what is loaded"),
        (["--cuda-graph-config", '{"decode": {"bs": [1, 2]}}'], "--cuda-graph-config is refused"),
        (["--speculative-moe-runner-backend", "triton"], "--speculative-moe-runner-backend is refused"),
        (["--enable-multi-layer-eagle"], "--enable-multi-layer-eagle is refused"),
        (["--quantization", "fp8"], "--quantization is refused"),
        (["--api-key", "sk-123"], "--api-key is refused: it carries a secret"),
        (["--api-key=sk-123"], "--api-key is refused: it carries a secret"),
        (["--admin-api-key", "x"], "--admin-api-key is refused"),
        (["--json-model-override-args", "{}"], "--json-model-override-args is refused"),
        (["--kv-cache-dtype", "fp8_e4m3"], "--kv-cache-dtype is refused"),
        (["--disable-radix-cache"], "is not on sparkgate's extra_args allow-list"),
    ],
)
def test_extra_args_outside_the_allow_list_are_refused(tmp_path, extra, said):
    ref = write(tmp_path, "user", f"extends: [all-three]\nsglang:\n  extra_args: {extra!r}\n")
    message = refusal(ref)
    assert said in message and "sglang.extra_args[0]" in message


def test_every_allowed_extra_flag_exists_in_sglang():
    from sparkgate.sglang import flags as F
    from sparkgate.sglang.parser import option_table

    missing = [flag for flag in F.EXTRA_ARGS_ALLOWED if flag not in option_table()]
    assert not missing
    assert not set(F.EXTRA_ARGS_ALLOWED) & set(F.EXTRA_ARGS_REFUSAL_REASONS)


def test_secret_never_reaches_the_rendered_bundle_through_a_profile(tmp_path):
    """Every way a profile could carry an API key into argv/env is refused before anything is written."""
    for body in (
        "sglang:\n  extra_args: ['--api-key', 'sk-live-123']\n",
        "env:\n  EXA_API_KEY: 'sk-live-123'\n",
    ):
        ref = write(tmp_path, "user", "extends: [baseline]\n" + body)
        assert "secret" in refusal(ref)


@pytest.mark.parametrize("value", ["on", "ON", "maybe", ""])
def test_envbool_values_sglang_cannot_parse_are_refused(tmp_path, value):
    ref = write(tmp_path, "user", f"extends: [baseline]\nenv:\n  SGLANG_LOG_GC: {value!r}\n")
    assert "SGLang's EnvBool reads only" in refusal(ref)


@pytest.mark.parametrize("value", ["1", "true", "Yes", "y", "0", "false", "NO", "n"])
def test_envbool_values_sglang_parses_are_accepted(tmp_path, value):
    ref = write(tmp_path, "user", f"extends: [baseline]\nenv:\n  SGLANG_LOG_GC: {value!r}\n")
    assert profiles.load(ref).plan.env_map()["SGLANG_LOG_GC"] == value


def test_env_names_are_judged_per_image(tmp_path):
    """The fork's FP8 variable is declared for the fork image only; elsewhere it is owned anyway."""
    from sparkgate.sglang import env as sglang_env

    assert "SGLANG_ENABLE_FP8_LM_HEAD" not in sglang_env.declared()
    assert "SGLANG_ENABLE_FP8_LM_HEAD" in sglang_env.declared(("SGLANG_ENABLE_FP8_LM_HEAD",))


@pytest.mark.parametrize(
    "cache_dir", ["/", "/root", "/etc/humming/cache", "/proc/x/y", "/bundle/a/b"],
)
def test_humming_cache_root_cannot_cover_system_directories(tmp_path, cache_dir):
    ref = write(tmp_path, "user", f"extends: [humming]\noptimizations:\n  humming:\n    cache_dir: {cache_dir!r}\n")
    assert "optimizations.humming.cache_dir" in refusal(ref)


# --- DSpark ------------------------------------------------------------------------------------------------


def refusal_lines(reference, needle) -> list[str]:
    lines = [line for line in refusal(reference).splitlines() if needle in line]
    assert lines, needle
    return lines


def test_nextn_and_dspark_together_are_refused_naming_both(tmp_path):
    ref = write(tmp_path, "user", "extends: [all-three]\noptimizations:\n  dspark:\n    enabled: true\n")
    [line] = refusal_lines(ref, "one speculative algorithm per engine")
    assert line.startswith(f"{ref}: optimizations.dspark.enabled + optimizations.mtp.enabled (from profiles/mtp.yaml)")
    assert "Fix: keep one" in line


@pytest.mark.parametrize(("cache_len", "said"), [
    (16, "16 is below 2 x num_draft_tokens = 18"),
    (8, "8 is below 2 x num_draft_tokens = 18"),
    (48, "48 is not a power of two"),
    (24, "24 is not a power of two"),
])
def test_a_ring_too_small_or_not_a_power_of_two_is_refused(tmp_path, cache_len, said):
    ref = write(tmp_path, "user", f"extends: [dspark]\noptimizations:\n  dspark:\n    ring:\n      cache_len: {cache_len}\n")
    [line] = refusal_lines(ref, said)
    assert line.startswith(f"{ref}: optimizations.dspark.ring.cache_len")
    assert "memory-pool setup" in line and "Fix: set" in line and "32" in line


def test_a_ring_off_needs_no_length(tmp_path):
    ref = write(tmp_path, "user", "extends: [dspark]\noptimizations:\n  dspark:\n    ring:\n      enable: false\n"
                                  "      cache_len: 3\n")
    argv = profiles.load(ref).plan.argv
    assert "--enable-linear-replayssm-spec" not in argv and "--linear-replayssm-cache-len" not in argv


@pytest.mark.parametrize("tokens", [8, 10])
def test_draft_tokens_other_than_block_plus_one_are_refused(tmp_path, tokens):
    ref = write(tmp_path, "user", f"extends: [dspark]\noptimizations:\n  dspark:\n    num_draft_tokens: {tokens}\n")
    [line] = refusal_lines(ref, "block_size + 1 = 9")
    assert line.startswith(f"{ref}: optimizations.dspark.num_draft_tokens + optimizations.dspark.block_size")
    assert "Fix: set num_draft_tokens: 9" in line


def test_dspark_above_batch_one_is_refused(tmp_path):
    ref = write(tmp_path, "user", "extends: [dspark]\nbatch_size: 2\n")
    [line] = refusal_lines(ref, "DSpark is launched and gated for batch 1")
    assert line.startswith(f"{ref}: batch_size + optimizations.dspark.enabled")


@pytest.mark.parametrize("running", ["null", "4"])
def test_dspark_needs_max_running_requests_one(tmp_path, running):
    ref = write(tmp_path, "user", f"extends: [dspark]\nsglang:\n  max_running_requests: {running}\n")
    [line] = refusal_lines(ref, "batch-1 profiles need --max-running-requests 1")
    assert line.startswith(f"{ref}: sglang.max_running_requests")
    assert running != "null" or "SGLang would pick its own, 48 with speculative decoding" in line


def test_dspark_flags_from_its_own_module_are_not_outside_mtp():
    """DSpark's module produces flags optimizations.mtp owns (draft path, draft tokens): it is enabled, so its
    own rules and checks gate them."""
    loaded = profiles.load("dspark")
    owners = {o.option: o.field for o in loaded.plan.options if o.option and o.option.startswith("--speculative")}
    assert owners == {
        "--speculative-algorithm": "optimizations.dspark", "--speculative-draft-model-path": "optimizations.dspark",
        "--speculative-dspark-block-size": "optimizations.dspark", "--speculative-num-draft-tokens": "optimizations.dspark",
    }


@pytest.mark.parametrize(("base", "extra", "owner"), [
    ("baseline", ["--speculative-algorithm", "DSPARK"], "optimizations.dspark"),
    ("all-three", ["--speculative-dspark-block-size", "8"], "optimizations.dspark"),
    ("mtp", ["--linear-replayssm-cache-len", "32"], "optimizations.dspark"),
    ("baseline", ["--enable-linear-replayssm-spec"], "optimizations.dspark"),
    ("dspark", ["--speculative-num-steps", "2"], "optimizations.mtp"),  # not produced by the enabled module
    ("dspark", ["--speculative-eagle-topk", "4"], "optimizations.mtp"),
    ("baseline", ["--speculative-algorithm", "NEXTN"], "optimizations.mtp"),
])
def test_speculative_flags_outside_their_owner_stay_refused(tmp_path, base, extra, owner):
    ref = write(tmp_path, "user", f"extends: [{base}]\nsglang:\n  extra_args: {extra!r}\n")
    message = refusal(ref)
    outside = [line for line in message.splitlines() if "outside optimizations." in line]
    assert [f"outside {owner}," in line for line in outside] == [True], message
    assert outside[0].startswith(f"{ref}: sglang.extra_args[0]")


def test_dspark_flags_restated_in_extra_args_are_refused(tmp_path):
    ref = write(tmp_path, "user", "extends: [dspark]\nsglang:\n  extra_args: ['--speculative-draft-model-path', '/x']\n")
    assert "--speculative-draft-model-path is modelled by optimizations.dspark" in refusal(ref)


def test_the_ring_excludes_enable_linear_replayssm(tmp_path):
    ref = write(tmp_path, "user", "extends: [dspark]\nsglang:\n  extra_args: ['--enable-linear-replayssm']\n")
    [line] = refusal_lines(ref, "mutually exclusive")
    assert line.startswith(f"{ref}: sglang.extra_args[0] + optimizations.dspark.ring.enable")


def test_the_ring_needs_a_triton_or_flashinfer_decode_backend(tmp_path):
    ref = write(tmp_path, "user", "extends: [dspark]\noptimizations:\n  dspark:\n    linear_attn_decode_backend: cutedsl\n")
    assert "optimizations.dspark.linear_attn_decode_backend" in refusal(ref)


@pytest.mark.parametrize("path", ["/models/Ling-3.0-flash-fp4", "/models/Ling-3.0-flash-fp4/dspark", "/models"])
def test_the_drafter_is_its_own_model_directory(tmp_path, path):
    ref = write(tmp_path, "user", f"extends: [dspark]\noptimizations:\n  dspark:\n    draft_model_path: {path}\n")
    assert f"{ref}: optimizations.dspark.draft_model_path" in refusal(ref)


@pytest.mark.parametrize(("field", "value", "said"), [
    ("min_accept_length", 1.5, "1.5 is below the gate's minimum 2.0"),
    ("min_decode_tok_s", 45.0, "45.0 tok/s is below the all-three (NEXTN) figure 53.89"),
])
def test_dspark_floors_may_only_tighten(tmp_path, field, value, said):
    ref = write(tmp_path, "user", f"extends: [dspark]\noptimizations:\n  dspark:\n    {field}: {value}\n")
    [line] = refusal_lines(ref, said)
    assert line.startswith(f"{ref}: optimizations.dspark.{field}")


@pytest.mark.parametrize(("field", "value"), [
    ("drafter_revision", "main"), ("drafter_revision", "8E5D9988C9B09DE13F1F7C9D999FF2BFA533A149"),
    ("drafter_repo", "Ling-3.0-flash-dspark"), ("drafter_architecture", "Ling DSpark"),
])
def test_the_drafter_pin_is_validated(tmp_path, field, value):
    ref = write(tmp_path, "user", f"extends: [dspark]\noptimizations:\n  dspark:\n    {field}: {value!r}\n")
    assert f"{ref}: optimizations.dspark.{field}" in refusal(ref)


def test_the_ring_backend_is_judged_on_the_final_argv(tmp_path):
    """The last --linear-attn-decode-backend wins in SGLang's parser, so one restated in extra_args counts."""
    ref = write(tmp_path, "user", "extends: [dspark]\nsglang:\n  extra_args: ['--linear-attn-decode-backend', 'cutedsl']\n")
    [line] = refusal_lines(ref, "the spec-verify ring needs the triton or flashinfer linear-attention decode backend")
    assert line.startswith(f"{ref}: sglang.extra_args[0] + optimizations.dspark.ring.enable") and "'cutedsl'" in line


@pytest.mark.parametrize("name", ["SGLANG_DSPARK_FOLDED_PROPOSAL", "SGLANG_DSPARK_USE_GREEDY_DRAFT",
                                  "SGLANG_DSPARK_FAST_KERNEL"])
def test_dspark_knobs_are_refused_in_env(tmp_path, name):
    """SGLANG_DSPARK_FOLDED_PROPOSAL=0 keeps the proposal eager without a log line: only speed would show it."""
    ref = write(tmp_path, "user", f"extends: [dspark]\nenv:\n  {name}: '0'\n")
    [line] = refusal_lines(ref, "SGLANG_DSPARK_* variables are refused")
    assert line.startswith(f"{ref}: env.{name}") and "Fix: remove it from env:" in line


def test_a_named_reason_wins_over_its_prefix(tmp_path):
    ref = write(tmp_path, "user", "extends: [dspark]\nenv:\n  SGLANG_DSPARK_FP32_LM_HEAD: '1'\n")
    assert "changes the LM head's precision outside optimizations.fp8_lm_head" in refusal(ref)


@pytest.mark.parametrize("parent", ["dspark", "all-three"])
@pytest.mark.parametrize(("name", "prefix"), [
    ("SGLANG_SIMULATE_ACC_LEN", "SGLANG_SIMULATE_"), ("SGLANG_SIMULATE_ACC_METHOD", "SGLANG_SIMULATE_"),
    ("SGLANG_OPT_DSV41_DSPARK_MID_FOLD", "SGLANG_OPT_DSV41_"), ("SGLANG_OPT_DSV41_BLOCKWISE_REJECTION", "SGLANG_OPT_DSV41_"),
    ("SGLANG_DFLASH_EAGER_DRAFT_SAMPLER", "SGLANG_DFLASH_"), ("SGLANG_SPEC_TP_SYNC", "SGLANG_SPEC_"),
    ("SGLANG_TEST_RAGGED_VERIFY_FORCE_UNIFORM_CAPTURE", "SGLANG_TEST_"), ("SGLANG_DEBUG_POISON_POOL", "SGLANG_DEBUG_"),
])
def test_knobs_that_fake_or_reshape_speculation_are_refused(tmp_path, parent, name, prefix):
    """SGLANG_SIMULATE_ACC_LEN forces every verify step's committed length (dspark_verify.py): the accept-length and
    speed floors would pass on an engine emitting junk. Declared by SGLang, so only an explicit refusal stops it."""
    ref = write(tmp_path, "user", f"extends: [{parent}]\nenv:\n  {name}: '6'\n")
    [line] = refusal_lines(ref, f"{prefix}* variables are refused")
    assert line.startswith(f"{ref}: env.{name}") and "Fix: remove it from env:" in line


def test_the_ragged_verify_planner_is_refused(tmp_path):
    ref = write(tmp_path, "user", "extends: [dspark]\nenv:\n  SGLANG_RAGGED_VERIFY_MODE: cap-accept\n")
    [line] = refusal_lines(ref, "SGLANG_RAGGED_VERIFY_MODE is refused")
    assert line.startswith(f"{ref}: env.SGLANG_RAGGED_VERIFY_MODE")


@pytest.mark.parametrize("named", ["DSparkDraftModel", "BailingMoeV3ForCausalLM", "Qwen3DSparkModel"])
def test_the_drafter_class_is_the_one_sglang_registers_for_ling(tmp_path, named):
    ref = write(tmp_path, "user", f"extends: [dspark]\noptimizations:\n  dspark:\n    drafter_architecture: {named}\n")
    [line] = refusal_lines(ref, f"{named!r} is not the drafter SGLang 0.5.23 loads for a Ling-3.0-flash target")
    assert line.startswith(f"{ref}: optimizations.dspark.drafter_architecture") and "LingDSparkModel" in line


def test_every_allowed_sglang_variable_is_declared_by_the_pinned_sglang():
    """The allow-list cannot rot: each name is in SGLang 0.5.23's class Envs (the committed manifest)."""
    declared = sglang_env.declared(())
    assert set(F.ENV_ALLOWED_SGLANG) <= set(declared)
    assert all(name.startswith(F.ENV_PREFIX) and why for name, why in F.ENV_ALLOWED_SGLANG.items())


@pytest.mark.parametrize("name", ["SGLANG_HUMMING_USE_F16_ACCUM", "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION",
                                  "SGLANG_DISABLE_OUTLINES_DISK_CACHE"])
def test_a_declared_sglang_variable_off_the_allow_list_is_refused(tmp_path, name):
    ref = write(tmp_path, "user", f"extends: [all-three]\nenv:\n  {name}: '1'\n")
    [line] = refusal_lines(ref, "is not one of the SGLang variables a profile may set")
    assert line.startswith(f"{ref}: env.{name}") and "SGLANG_LOG_GC" in line


def test_variables_outside_sglang_still_pass_through(tmp_path):
    ref = write(tmp_path, "user", "extends: [all-three]\nenv:\n  NCCL_DEBUG: WARN\n  SGLANG_LOG_GC: '1'\n")
    assert profiles.load(ref).plan.env_map()["NCCL_DEBUG"] == "WARN"


def test_an_image_pinning_other_sglang_facts_is_refused(tmp_path, monkeypatch):
    """The rules, checks and simulator read one set of SGLang facts; an image on another set is refused by name."""
    from sparkgate import images
    lock = images.load_lock()
    engine = lock.engine_images["spark-fork"]
    moved = engine.model_copy(update={"sglang_facts": engine.sglang_facts.model_copy(
        update={"fixture": "sglang-conformance-0.6.0.json"})})
    other = lock.model_copy(update={"engine_images": {**lock.engine_images, "spark-fork": moved}})
    monkeypatch.setattr(profiles, "load_lock", lambda: other)
    message = refusal("all-three")
    (line,) = [line for line in message.splitlines() if "SGLang facts" in line]
    assert "image" in line and "fixture sglang-conformance-0.6.0.json" in line
    assert "held to sglang-conformance-0.5.23.json" in line and "docs/upgrade.md" in line
    monkeypatch.setattr(profiles, "load_lock", lambda: lock)
    assert profiles.load("all-three").profile.image == "spark-fork"  # the pinned facts pass
