"""Preflight of the DSpark drafter directory, on directories laid out the way `hf download --local-dir` lays
them out: the metadata files are written by huggingface_hub's own `write_download_metadata`, so the format
preflight reads is the library's, not a guess."""

from __future__ import annotations

import hashlib
import json
import os

import pytest
from huggingface_hub._local_folder import write_download_metadata
from huggingface_hub.utils.sha import git_hash
from hypothesis import given
from hypothesis import strategies as st

from sparkgate.deploy import drafter, preflight
from sparkgate.profile import loading as profiles

REVISION = "8e5d9988c9b09de13f1f7c9d999ff2bfa533a149"
OTHER_REVISION = "0" * 40
REPO = "inclusionAI/Ling-3.0-flash-dspark"
PIN = drafter.Pin(REPO, REVISION, "LingDSparkModel", 8)
WEIGHTS = b"\x00drafter weights\x01" * 64
DOWNLOAD = f"hf download {REPO} --revision {REVISION} --local-dir "
FIX = f"Fix: {DOWNLOAD}"
CLEAN_FIX = "Fix: move the directory aside and re-download: mv -- "


def download(directory, config=None, weights=WEIGHTS, revision=REVISION, name="model.safetensors"):
    """A drafter directory as `hf download --local-dir` leaves it: for a regular (non-LFS) file the etag is its
    git blob id (huggingface_hub's own `git_hash`), for an LFS file its SHA-256."""
    directory.mkdir(parents=True, exist_ok=True)
    config = {"architectures": ["LingDSparkModel"], "block_size": 8} if config is None else config
    recorded_file(directory, "config.json", json.dumps(config).encode(), revision)
    (directory / name).write_bytes(weights)
    write_download_metadata(directory, name, revision, hashlib.sha256(weights).hexdigest())
    return directory


def recorded_file(directory, name, content: bytes, revision=REVISION):
    """A regular file as the download writes it, with its git-blob etag."""
    (directory / name).parent.mkdir(parents=True, exist_ok=True)
    (directory / name).write_bytes(content)
    write_download_metadata(directory, name, revision, git_hash(content))


def test_the_metadata_format_is_huggingface_hubs(tmp_path):
    directory = download(tmp_path / "d")
    lines = (directory / ".cache/huggingface/download/model.safetensors.metadata").read_text().splitlines()
    assert lines[0] == REVISION and lines[1] == hashlib.sha256(WEIGHTS).hexdigest()


def test_the_pinned_download_passes(tmp_path):
    directory = download(tmp_path / "d")
    recorded_file(directory, "tokenizer_config.json", b'{"model_max_length": 32768}\n')
    recorded_file(directory, "README.md", b"# Ling-3.0-flash-dspark\n")
    assert (directory / ".cache/huggingface/.gitignore").is_file(), "the library's own bookkeeping is not refused"
    assert drafter.problems(directory, PIN) == []


def test_weights_in_a_subfolder_and_several_shards_pass(tmp_path):
    directory = download(tmp_path / "d")
    (directory / "sub").mkdir()
    shard = b"second shard"
    (directory / "sub" / "model-2.safetensors").write_bytes(shard)
    write_download_metadata(directory, "sub/model-2.safetensors", REVISION, hashlib.sha256(shard).hexdigest())
    assert drafter.problems(directory, PIN) == []


def one_fault(directory) -> str:
    found = drafter.problems(directory, PIN)
    assert len(found) == 1, found
    assert "\n" not in found[0] and f"{CLEAN_FIX}{directory} {directory}.refused && {DOWNLOAD}{directory}" in found[0]
    return found[0]


def test_missing_directory(tmp_path):
    [fault] = drafter.problems(tmp_path / "absent", PIN)
    assert "no drafter directory" in fault and f"{FIX}{tmp_path / 'absent'} (or point" in fault


def test_config_not_json(tmp_path):
    directory = download(tmp_path / "d")
    recorded_file(directory, "config.json", b"{architectures: [LingDSparkModel]")  # recorded: only the JSON fails
    assert "config.json': not readable JSON" in one_fault(directory)


def test_config_a_json_list(tmp_path):
    assert "a JSON list, expected an object" in one_fault(download(tmp_path / "d", config=["LingDSparkModel"]))


def test_another_architecture(tmp_path):
    fault = one_fault(download(tmp_path / "d", config={"architectures": ["Qwen3DSparkModel"]}))
    assert "architectures ['Qwen3DSparkModel'], expected to contain 'LingDSparkModel'" in fault


@pytest.mark.parametrize("config", [
    {"architectures": ["LingDSparkModel"], "block_size": 7},
    {"architectures": ["LingDSparkModel"], "dspark_block_size": 7, "block_size": 8},
    {"architectures": ["LingDSparkModel"], "dflash_config": {"block_size": 7}},
])
def test_another_block_size(tmp_path, config):
    assert "block_size 7, expected 8" in one_fault(download(tmp_path / "d", config=config))


LING = {"architectures": ["LingDSparkModel"], "block_size": 8}
PIN_256K = drafter.Pin(REPO, REVISION, "LingDSparkModel", 8, context_length=262144)


@pytest.mark.parametrize(("config", "derived"), [
    ({**LING, "max_position_embeddings": 40960}, 40960),
    # transformers 5 records original_max_position_embeddings for yarn, longrope and llama3: no factor
    ({**LING, "max_position_embeddings": 65536, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, 65536),
    ({**LING, "max_position_embeddings": 32768, "rope_scaling": {"type": "longrope", "factor": 8.0}}, 32768),
    ({**LING, "max_position_embeddings": 32768, "rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, 32768),
    ({**LING, "max_position_embeddings": 32768, "rope_parameters": {"rope_type": "linear", "factor": 4.0}}, 131072),
    ({**LING, "max_position_embeddings": 262144, "seq_length": 4096}, 4096),  # SGLang reads seq_length first
    # get_hf_text_config: a text sub-config is where SGLang reads, whatever the top level says
    ({**LING, "max_position_embeddings": 262144, "text_config": {"max_position_embeddings": 4096}}, 4096),
    ({**LING, "max_position_embeddings": 262144, "language_config": {"seq_length": 8192}}, 8192),
])
def test_a_drafter_whose_context_is_shorter_than_the_engines_is_refused_as_sglang_derives_it(tmp_path, config, derived):
    """The GPU lane's DSpark start died on this: the draft's ModelConfig takes the target's context length and raises
    when the drafter derives a shorter one (sglang/srt/configs/model_config.py _derive_context_length)."""
    [fault] = drafter.problems(download(tmp_path / "d", config=config), PIN_256K)
    assert f"the drafter's context is {derived} tokens, expected at least sglang.context_length 262144" in fault
    # Not a re-download: the pinned revision is what it is.
    assert fault.endswith(f"Fix: a drafter revision made for this context, or set sglang.context_length to {derived}")


@pytest.mark.parametrize("config", [
    {**LING, "max_position_embeddings": 262144},
    {**LING, "max_position_embeddings": 65536, "rope_scaling": {"rope_type": "linear", "factor": 4.0}},
    {**LING, "max_position_embeddings": 65536, "rope_scaling": {"rope_type": "dynamic", "factor": 4}},
    LING,  # no key: the model class's default decides, which the file cannot show
    {**LING, "text_config": {"max_position_embeddings": 262144}, "max_position_embeddings": 4096},
])
def test_a_drafter_context_long_enough_or_not_in_the_file_is_not_refused_for_it(tmp_path, config):
    assert drafter.problems(download(tmp_path / "d", config=config), PIN_256K) == []


@pytest.mark.parametrize(("config", "named"), [
    ({**LING, "max_position_embeddings": "262144"}, "max_position_embeddings is '262144'"),
    ({**LING, "max_position_embeddings": True}, "max_position_embeddings is True"),
    ({**LING, "seq_length": 0, "max_position_embeddings": 262144}, "seq_length is 0"),
    ({**LING, "max_position_embeddings": 4096, "rope_scaling": "yarn"}, "rope_scaling is 'yarn'"),
    ({**LING, "max_position_embeddings": 65536, "rope_scaling": {"rope_type": "linear", "factor": float("nan")}},
     "rope_scaling.factor is nan"),
    ({**LING, "text_config": [262144]}, "text_config is [262144]"),
])
def test_a_context_that_is_there_but_no_positive_number_is_refused_not_guessed(tmp_path, config, named):
    [fault] = drafter.problems(download(tmp_path / "d", config=config), PIN_256K)
    assert named in fault and "so the drafter's context cannot be read" in fault


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                    max_leaves=8)
KEYS = st.sampled_from([*drafter.CONTEXT_LENGTH_KEYS, *drafter.SUB_CONFIGS, "rope_scaling", "rope_parameters",
                        "factor", "rope_type", "type", "original_max_position_embeddings"])


@given(st.dictionaries(KEYS | st.text(max_size=8), JSON | st.dictionaries(KEYS, JSON, max_size=3), max_size=6))
def test_any_config_gives_a_context_none_or_one_refusal_and_nothing_else(config):
    try:
        context = drafter._context_length(config)
    except ValueError as exc:
        assert len(str(exc)) < 1000 and "\n" not in str(exc)
        return
    assert context is None or (isinstance(context, int) and context >= 0)


def test_the_profiles_context_is_what_the_drafter_is_held_to(tmp_path, monkeypatch):
    profile = profiles.load("dspark").profile
    assert drafter.Pin.of(profile.optimizations.dspark, profile.sglang.context_length).context_length == 262144
    short = download(tmp_path / "d", config={**LING, "max_position_embeddings": 32768})
    [finding] = preflight.dspark_drafter(profile, directory=short)
    assert not finding.ok and "sglang.context_length 262144" in finding.detail


def test_no_block_size_in_the_config_is_fine(tmp_path):
    assert drafter.problems(download(tmp_path / "d", config={"architectures": ["LingDSparkModel"]}), PIN) == []


def test_wrong_revision_names_both_and_the_command(tmp_path):
    found = drafter.problems(download(tmp_path / "d", revision=OTHER_REVISION), PIN)
    assert len(found) == 2  # config.json and the weights
    assert all(f"revision '{OTHER_REVISION}', expected {REVISION}" in line and CLEAN_FIX in line for line in found)


def test_a_copy_without_the_download_metadata_is_refused(tmp_path):
    directory = download(tmp_path / "d")
    for record in (directory / ".cache/huggingface/download").iterdir():
        record.unlink()
    found = drafter.problems(directory, PIN)
    assert len(found) == 2 and all("no download metadata" in line for line in found)


def test_corrupt_weights(tmp_path):
    directory = download(tmp_path / "d")
    (directory / "model.safetensors").write_bytes(WEIGHTS[:-1] + b"\xff")
    fault = one_fault(directory)
    assert "model.safetensors': SHA-256" in fault and f"expected {hashlib.sha256(WEIGHTS).hexdigest()}" in fault


def test_a_deleted_shard_the_download_recorded(tmp_path):
    directory = download(tmp_path / "d")
    write_download_metadata(directory, "model-2.safetensors", REVISION, "b" * 64)
    assert "model-2.safetensors': missing, but the download recorded it" in one_fault(directory)


def test_no_weights(tmp_path):
    directory = download(tmp_path / "d")
    (directory / "model.safetensors").unlink()
    (directory / ".cache/huggingface/download/model.safetensors.metadata").unlink()
    assert "no *.safetensors files" in one_fault(directory)


def test_an_etag_that_is_no_hash_proves_nothing(tmp_path):
    directory = download(tmp_path / "d")
    write_download_metadata(directory, "model.safetensors", REVISION, "W/not-a-hash")
    assert "recorded etag 'W/not-a-hash' is neither a SHA-256" in one_fault(directory)


def test_a_weight_file_stored_without_lfs_is_proven_by_its_git_blob_id(tmp_path):
    directory = download(tmp_path / "d")
    write_download_metadata(directory, "model.safetensors", REVISION, git_hash(WEIGHTS))
    assert drafter.problems(directory, PIN) == []
    write_download_metadata(directory, "model.safetensors", REVISION, git_hash(WEIGHTS + b"!"))
    assert f"git blob SHA-1 {git_hash(WEIGHTS)}, expected {git_hash(WEIGHTS + b'!')}" in one_fault(directory)


def test_symlinked_weights_escaping_the_directory(tmp_path):
    directory = download(tmp_path / "d")
    outside = tmp_path / "elsewhere.safetensors"
    outside.write_bytes(WEIGHTS)
    (directory / "model.safetensors").unlink()
    os.symlink(outside, directory / "model.safetensors")
    fault = one_fault(directory)
    assert "a symlink to" in fault and "outside the drafter directory" in fault


def test_symlinked_config_escaping_the_directory(tmp_path):
    directory = download(tmp_path / "d")
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["LingDSparkModel"]}))
    (directory / "config.json").unlink()
    os.symlink(tmp_path / "config.json", directory / "config.json")
    assert "outside the drafter directory" in one_fault(directory)


def test_large_files_report_hashing_progress(tmp_path, monkeypatch):
    monkeypatch.setattr(drafter, "PROGRESS_EVERY", 256)
    monkeypatch.setattr(drafter, "HASH_CHUNK", 128)
    said = []
    assert drafter.problems(download(tmp_path / "d"), PIN, said.append) == []
    assert said[0].startswith("hashing drafter 'model.safetensors'") and len(said) >= 3


# --- every file proven, nothing unrecorded (SGLang reads the drafter's config with trust_remote_code) ---------


EVIL_CONFIG = {"architectures": ["LingDSparkModel"], "block_size": 8,
               "auto_map": {"AutoConfig": "configuration_evil.EvilConfig"}}


def test_an_edited_config_is_refused_by_its_git_blob_id(tmp_path):
    directory = download(tmp_path / "d")
    recorded = git_hash((directory / "config.json").read_bytes())
    edited = json.dumps(EVIL_CONFIG).encode()
    (directory / "config.json").write_bytes(edited)
    fault = one_fault(directory)
    assert f"config.json': git blob SHA-1 {git_hash(edited)}, expected {recorded} as downloaded" in fault


def test_an_unrecorded_code_file_is_refused_and_named(tmp_path):
    directory = download(tmp_path / "d")
    (directory / "configuration_evil.py").write_text("import os; os.system('id')\n")
    fault = one_fault(directory)
    assert f"{str(directory / 'configuration_evil.py')!r}: not written by the download" in fault


def test_the_reviewers_reproduction_edited_config_plus_unrecorded_code(tmp_path):
    directory = download(tmp_path / "d")
    (directory / "config.json").write_text(json.dumps(EVIL_CONFIG))
    write_download_metadata(directory, "config.json", REVISION, "0" * 40)
    (directory / "configuration_evil.py").write_text("import os; os.system('id')\n")
    found = drafter.problems(directory, PIN)
    assert len(found) == 2 and all(CLEAN_FIX in line and "\n" not in line for line in found), found
    assert any("configuration_evil.py': not written by the download" in line for line in found)
    assert any("config.json': git blob SHA-1" in line and f"expected {'0' * 40}" in line for line in found)


@pytest.mark.parametrize("name", ["tokenizer.json", "modeling_ling_dspark.py", "sub/extra.safetensors.index.json",
                                  ".hidden.py", "sub/.cache/x.py"])
def test_any_unrecorded_file_anywhere_outside_the_downloads_cache_is_refused(tmp_path, name):
    directory = download(tmp_path / "d")
    (directory / name).parent.mkdir(parents=True, exist_ok=True)
    (directory / name).write_text("{}")
    assert f"{name}': not written by the download" in one_fault(directory)


def test_a_recorded_regular_file_with_a_wrong_sha1_is_refused(tmp_path):
    directory = download(tmp_path / "d")
    content = b'{"version": "1.0"}'
    recorded_file(directory, "tokenizer.json", content)
    assert drafter.problems(directory, PIN) == []
    write_download_metadata(directory, "tokenizer.json", REVISION, "f" * 40)
    assert f"tokenizer.json': git blob SHA-1 {git_hash(content)}, expected {'f' * 40}" in one_fault(directory)


def test_a_recorded_file_at_another_revision_is_refused(tmp_path):
    directory = download(tmp_path / "d")
    recorded_file(directory, "modeling_ling_dspark.py", b"# drafter code\n", revision=OTHER_REVISION)
    assert f"modeling_ling_dspark.py': downloaded at revision '{OTHER_REVISION}'" in one_fault(directory)


def test_a_deleted_recorded_file_that_is_no_weight(tmp_path):
    directory = download(tmp_path / "d")
    recorded_file(directory, "tokenizer.json", b"{}")
    (directory / "tokenizer.json").unlink()
    assert "tokenizer.json': missing, but the download recorded it" in one_fault(directory)


def test_the_streamed_git_blob_id_is_the_librarys(tmp_path, monkeypatch):
    monkeypatch.setattr(drafter, "HASH_CHUNK", 7)  # many chunks: the size header is written once, up front
    content = bytes(range(256)) * 5
    directory = download(tmp_path / "d")
    recorded_file(directory, "big.bin", content)
    assert drafter.problems(directory, PIN) == []


def test_a_fifo_is_refused_without_reading_it(tmp_path):
    directory = download(tmp_path / "d")
    recorded_file(directory, "tokenizer.json", b"{}")
    (directory / "tokenizer.json").unlink()
    os.mkfifo(directory / "tokenizer.json")  # opening it to hash would block forever
    assert "tokenizer.json': not a regular file" in one_fault(directory)


def test_a_linked_directory_is_refused(tmp_path):
    directory = download(tmp_path / "d")
    (directory / "inner").mkdir()
    os.symlink(directory / "inner", directory / "code")
    assert "code': not a regular file" in one_fault(directory)


def test_a_directory_preflight_cannot_list_is_refused(tmp_path, monkeypatch):
    directory = download(tmp_path / "d")
    (directory / "hidden").mkdir()
    (directory / "hidden" / "configuration_evil.py").write_text("")
    real_scandir = os.scandir

    def scandir(path):  # as for a directory only another user may read (the tests run as root)
        if os.fspath(path).endswith("hidden"):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    assert "hidden': a directory preflight cannot list ('Permission denied'" in one_fault(directory)


def test_many_unrecorded_files_are_named_up_to_a_bound_then_counted(tmp_path):
    directory = download(tmp_path / "d")
    for index in range(drafter.MAX_UNRECORDED_LISTED + 5):
        (directory / f"stray_{index:02d}.py").write_text("")
    found = drafter.problems(directory, PIN)
    assert len(found) == drafter.MAX_UNRECORDED_LISTED + 1
    assert "5 more files not written by the download" in found[-1]


# --- bounded, uninjectable findings ----------------------------------------------------------------------------


def test_a_huge_architectures_value_is_capped_with_its_length(tmp_path):
    fault = one_fault(download(tmp_path / "d", config={"architectures": ["x" * 300_000], "block_size": 8}))
    assert len(fault) < 1000 and "… (300004 chars)" in fault


def test_a_huge_block_size_value_is_capped_with_its_length(tmp_path):
    fault = one_fault(download(tmp_path / "d", config={"architectures": ["LingDSparkModel"],
                                                       "block_size": "8" * 300_000}))
    assert len(fault) < 1000 and "block_size '888" in fault and "… (300000 chars)" in fault


def test_a_value_with_a_newline_cannot_forge_a_line(tmp_path):
    fault = one_fault(download(tmp_path / "d", config={"architectures": ["x\nFix: rm -rf ~"]}))
    assert "architectures ['x\\nFix: rm -rf ~']" in fault


def test_a_deeply_nested_config_is_one_line(tmp_path):
    directory = download(tmp_path / "d")
    recorded_file(directory, "config.json", b"[" * 100_000 + b"]" * 100_000)
    assert "config.json': not readable JSON (RecursionError" in one_fault(directory)


@pytest.mark.parametrize("name", ["a\nFix: rm -rf ~.safetensors", "a\nFix: rm -rf ~.py", "a\rb\u2028c.json"])
def test_a_file_name_with_a_line_break_is_quoted(tmp_path, name):
    directory = download(tmp_path / "d")
    (directory / name).write_bytes(b"w")
    fault = one_fault(directory)
    assert repr(str(directory / name)) in fault and fault.splitlines() == [fault]


def test_a_directory_name_with_a_line_break_is_one_line(tmp_path):
    directory = download(tmp_path / "d\nFix: rm -rf ~")
    [fault] = drafter.problems(directory, PIN)
    assert fault.startswith(repr(str(directory))) and "\n" not in fault and "control characters" in fault


def test_a_long_name_is_capped(tmp_path):
    directory = download(tmp_path / "d")
    deep = directory.joinpath(*["n" * 200] * 3)
    deep.mkdir(parents=True)
    (deep / "x.py").write_text("")
    fault = one_fault(directory)
    assert len(fault) < 1000 and "…" in fault  # the head, then the tail with the file's own name
    assert f"{'n' * 100}/x.py' ({len(str(deep / 'x.py'))} chars): not written by the download" in fault


# --- the preflight finding, from the profile ------------------------------------------------------------


def test_preflight_reads_the_pin_from_the_profile_and_the_directory_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARKGATE_DSPARK_DIR", str(download(tmp_path / "drafter")))
    [finding] = preflight.dspark_drafter(profiles.load("dspark").profile)
    assert finding.ok and finding.check == "dspark drafter" and "LingDSparkModel at 8e5d9988c9b0" in finding.detail
    monkeypatch.setenv("SPARKGATE_DSPARK_DIR", str(tmp_path / "missing"))
    [refused] = preflight.dspark_drafter(profiles.load("dspark").profile)
    assert not refused.ok and str(refused).startswith("[FAIL] dspark drafter: ") and FIX in refused.detail


def test_the_default_directory_is_the_one_compose_mounts(monkeypatch, tmp_path):
    monkeypatch.delenv("SPARKGATE_DSPARK_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert preflight.dspark_drafter_dir("/models/Ling-3.0-flash-dspark") == tmp_path / "models/Ling-3.0-flash-dspark"


def test_no_drafter_finding_without_dspark():
    assert preflight.dspark_drafter(profiles.load("all-three").profile) == []


def test_the_download_command_is_quoted_for_the_shell(tmp_path):
    assert PIN.download_command(tmp_path / "my models") == (
        f"hf download {REPO} --revision {REVISION} --local-dir '{tmp_path / 'my models'}'")


# --- in a deploy ---------------------------------------------------------------------------------------------


def test_a_spark_deploy_without_the_drafter_is_refused_before_anything_is_touched(tmp_path, monkeypatch):
    from tests.unit.test_deploy_order import FakeDocker, deploy_mod, options  # the deploy-order harness

    fake = FakeDocker(gateway_port=None, running=False)
    monkeypatch.setattr(preflight.docker_cli, "run", fake)
    monkeypatch.setattr(preflight, "spark_host", lambda *a, **k: [])  # this host is no Spark; the drafter is judged
    monkeypatch.setenv("SPARKGATE_DSPARK_DIR", str(tmp_path / "no-drafter"))
    lines: list[str] = []
    with pytest.raises(deploy_mod.DeployRefused) as refused:
        deploy_mod.deploy(options(tmp_path, 1, profile="dspark", target="spark"), say=lines.append)
    message = str(refused.value)
    assert message.startswith("preflight failed: dspark drafter: ") and "no drafter directory" in message
    assert f"{FIX}{tmp_path / 'no-drafter'}" in message and "\n" not in message
    assert fake.calls == [], "nothing rendered, stopped or started"
    assert any(line.strip().startswith("[FAIL] dspark drafter:") for line in lines)
