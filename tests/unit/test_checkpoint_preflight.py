"""The target checkpoint preflight (sparkgate/deploy/checkpoint.py) on small fake checkpoint directories: real
safetensors headers (read back by the `safetensors` package itself), tiny data, download records written by
huggingface_hub's own `write_download_metadata`. One test per fault, each asserting the exact refusal line."""

from __future__ import annotations

import json
import os
import struct

import pytest
import safetensors

from sparkgate.deploy import checkpoint, fileproof, preflight
from sparkgate.profile import loading as profiles
from tests.plugins import checkpoints as ck

PULL = "invoke model.pull --profile all-three"
FIX = f"Fix: {PULL}"
EXPECT = checkpoint.Expect(ck.REPO, ck.REVISION, ck.ARCHITECTURE, mtp=True, humming=True, pull=PULL)
FIRST, SECOND, THIRD = (ck.shard_name(i, 3) for i in range(3))


@pytest.fixture
def made(tmp_path):
    return ck.build(tmp_path / "m")


def where(made, relative: str) -> str:
    return repr(str(made.directory / relative))


def fault(made, expect=EXPECT, full=False) -> str:
    found = checkpoint.problems(made.directory, expect, full=full)
    assert len(found) == 1, found
    assert "\n" not in found[0]
    return found[0]


def drop(made, tensor: str) -> None:
    """Remove a tensor from the checkpoint (index and shard), re-recorded as the download would have it."""
    shard = made.weight_map.pop(tensor)
    del made.shards[shard][tensor]
    made.write_index()
    made.write_shard(shard)


# --- what passes -----------------------------------------------------------------------------------------------


def test_the_pinned_checkpoint_passes(made):
    report = checkpoint.check(made.directory, EXPECT)
    assert report.problems == []
    assert (report.shards, report.layers, report.experts, report.nextn_layer) == (3, 4, 4, 4)
    assert report.tensors == len(ck.tensor_names(made.config)) and report.files == 8
    assert not report.weights_hashed and report.tally.files == 5, "quick: every file but the weights is hashed"
    assert report.summary(made.directory, EXPECT).startswith(
        f"{made.directory}: BailingMoeV3ForCausalLM at {ck.REVISION[:12]}; 3 shards")


def test_the_full_proof_hashes_the_weights_too(made):
    report = checkpoint.check(made.directory, EXPECT, full=True)
    assert report.problems == [] and report.weights_hashed and report.tally.files == 8
    assert report.tally.bytes == sum((made.directory / r).stat().st_size for r in fileproof.recorded(made.directory))


def test_the_fake_shards_are_real_safetensors(made):
    for shard, tensors in made.shards.items():
        with safetensors.safe_open(str(made.directory / shard), framework="numpy") as handle:
            assert sorted(handle.keys()) == sorted(tensors)
            first = next(iter(tensors))
            assert handle.get_tensor(first).tobytes() == tensors[first]


def test_without_mtp_and_humming_the_nextn_layer_and_mxfp4_are_not_required(tmp_path):
    cfg = ck.config(nextn=0)
    cfg["quantization_config"].pop("routed_experts_quant_method")
    made = ck.build(tmp_path / "m", cfg)
    expect = checkpoint.Expect.from_profile(profiles.load("baseline").profile, "baseline")
    assert not expect.mtp and not expect.humming
    assert checkpoint.problems(made.directory, expect) == []


def test_the_profiles_decide_what_is_expected():
    three = checkpoint.Expect.from_profile(profiles.load("all-three").profile, "all-three")
    assert (three.repo, three.architecture, three.mtp, three.humming) == (ck.REPO, ck.ARCHITECTURE, True, True)
    assert three.revision is None and three.pull == PULL  # no commit pinned in the shipped profiles
    dspark = checkpoint.Expect.from_profile(profiles.load("dspark").profile, "dspark", revision=ck.REVISION)
    assert (dspark.mtp, dspark.humming, dspark.revision) == (False, True, ck.REVISION)


def test_an_unsharded_checkpoint_passes(tmp_path):
    made = ck.build(tmp_path / "m", shards=1)
    (made.directory / ck.shard_name(0, 1)).rename(made.directory / "model.safetensors")
    os.rename(fileproof.record_path(made.directory, ck.shard_name(0, 1)),
              fileproof.record_path(made.directory, "model.safetensors"))
    (made.directory / "model.safetensors.index.json").unlink()
    fileproof.record_path(made.directory, "model.safetensors.index.json").unlink()
    assert checkpoint.problems(made.directory, EXPECT) == []


# --- one test per fault, each the exact line -------------------------------------------------------------------


def test_no_nextn_layer(tmp_path):
    made = ck.build(tmp_path / "m", ck.config(nextn=0))
    assert fault(made) == (
        f"{where(made, 'config.json')}: num_nextn_predict_layers 0, expected 1 (the NEXTN layer MTP drafts with: "
        "SGLang's Bailing NextN loader takes exactly one). "
        f"Fix: {PULL} (inclusionAI/Ling-3.0-flash-fp4 ships it), or deploy a profile without mtp")


def test_two_nextn_layers_are_refused_too(tmp_path):
    made = ck.build(tmp_path / "m", ck.config(nextn=2))
    assert "num_nextn_predict_layers 2, expected 1" in fault(made)


def test_wrong_architecture(tmp_path):
    made = ck.build(tmp_path / "m", ck.config(architectures=["Qwen3MoeForCausalLM"]))
    assert fault(made) == (
        f"{where(made, 'config.json')}: architectures ['Qwen3MoeForCausalLM'], expected ['BailingMoeV3ForCausalLM'] "
        "(model.architecture; SGLang builds architectures[0]: another model in the checkpoint directory). "
        f"Fix: point SPARKGATE_MODEL_DIR at the inclusionAI/Ling-3.0-flash-fp4 checkpoint, or {PULL} into an "
        "empty directory")


def test_wrong_quantization(tmp_path):
    cfg = ck.config()
    cfg["quantization_config"]["routed_experts_quant_method"] = "fp8"
    made = ck.build(tmp_path / "m", cfg)
    assert fault(made) == (
        f"{where(made, 'config.json')}: quantization_config.routed_experts_quant_method 'fp8', expected 'mxfp4' "
        "(the MXFP4 routed experts Humming takes: SGLang hands other experts to another MoE method and serves "
        f"without Humming). Fix: {PULL} (inclusionAI/Ling-3.0-flash-fp4 ships MXFP4 experts), or deploy a profile "
        "without humming")


def test_no_quantization_config_at_all(tmp_path):
    made = ck.build(tmp_path / "m", {k: v for k, v in ck.config().items() if k != "quantization_config"})
    assert "quantization_config.routed_experts_quant_method None, expected 'mxfp4'" in fault(made)


def test_missing_shard(made):
    (made.directory / SECOND).unlink()  # as a download stopped before it: no file, no record
    fileproof.record_path(made.directory, SECOND).unlink()
    held = sorted(t for t, s in made.weight_map.items() if s == SECOND)
    assert fault(made) == (f"{where(made, SECOND)}: missing, but model.safetensors.index.json names it for "
                           f"{len(held)} tensors (e.g. {held[0]!r}). {FIX}")


def test_truncated_shard(made):
    path = made.directory / SECOND
    content = path.read_bytes()
    path.write_bytes(content[:-3])  # a partial copy: the record is still there
    length = struct.unpack("<Q", content[:8])[0]
    assert fault(made) == (
        f"{where(made, SECOND)}: {len(content) - 3} bytes, but its safetensors header ends its data at byte "
        f"{len(content)} (8 + header {length} + data {len(content) - 8 - length}): truncated, a partial copy or "
        f"download. {FIX}")


def test_shard_truncated_inside_its_header(made):
    path = made.directory / SECOND
    content = path.read_bytes()
    path.write_bytes(content[:100])
    length = struct.unpack("<Q", content[:8])[0]
    assert fault(made) == (f"{where(made, SECOND)}: safetensors header length {length} bytes runs past the file's "
                           f"100 bytes (truncated, or not a safetensors file). {FIX}")


def test_shard_bigger_than_its_header_says(made):
    path = made.directory / SECOND
    content = path.read_bytes()
    path.write_bytes(content + b"\0" * 5)
    length = struct.unpack("<Q", content[:8])[0]
    data = len(content) - 8 - length
    assert fault(made) == (
        f"{where(made, SECOND)}: {len(content) + 5} bytes, 5 more than its safetensors header accounts for "
        f"(8 + header {length} + data {data} = {len(content)}): not the file the download wrote. {FIX}")
    with pytest.raises(safetensors.SafetensorError, match="not fully covered"):
        safetensors.safe_open(str(path), framework="numpy")  # safetensors itself refuses it too


def test_index_naming_a_tensor_no_shard_holds(made):
    made.weight_map["model.layers.0.attention.k_proj.weight"] = FIRST
    made.write_index()
    assert fault(made) == (
        f"{where(made, 'model.safetensors.index.json')}: weight_map puts 'model.layers.0.attention.k_proj.weight' in "
        f"{FIRST}, whose safetensors header has no such tensor (the index and its shards are not one checkpoint). "
        f"{FIX}")


def test_missing_bridge_tensor(made):
    drop(made, "model.layers.4.eh_proj.weight")
    assert fault(made) == (
        f"{where(made, 'model.safetensors.index.json')}: weight_map has no 'model.layers.4.eh_proj.weight' (the "
        "NEXTN bridge tensor eh_proj of layer 4 = num_hidden_layers + 0, which MTP drafts with). " + FIX)


def test_revision_mismatch(tmp_path):
    made = ck.build(tmp_path / "m", revision=ck.OTHER_REVISION)
    found = checkpoint.problems(made.directory, EXPECT)
    assert found == [f"{where(made, relative)}: downloaded at revision '{ck.OTHER_REVISION}', expected {ck.REVISION} "
                     f"(model.revision). {FIX}" for relative in sorted(fileproof.recorded(made.directory))]
    assert len(found) == 8


def test_unrecorded_file(made):
    (made.directory / "modeling_evil.py").write_text("import os; os.system('id')\n")
    assert fault(made) == (
        f"{where(made, 'modeling_evil.py')}: not written by the download (no record in .cache/huggingface/download/; "
        "expected only the checkpoint's downloaded files, since SGLang may read or run any of them). Fix: remove it "
        "(only what the pinned download wrote may sit in the checkpoint the engine loads)")


def test_symlink_escaping(made, tmp_path):
    outside = tmp_path / "elsewhere.safetensors"
    outside.write_bytes((made.directory / SECOND).read_bytes())
    (made.directory / SECOND).unlink()
    os.symlink(outside, made.directory / SECOND)
    assert fault(made) == (f"{where(made, SECOND)}: a symlink to {str(outside)!r}, outside the checkpoint directory "
                           f"the engine mounts (expected a file inside it). {FIX}")


# --- more faults: bounded, hostile, hashed ---------------------------------------------------------------------


def test_missing_experts_are_named_up_to_a_bound_then_counted(made):
    for tensor in [t for t in made.weight_map if t.startswith("model.layers.2.mlp.experts.")]:
        drop(made, tensor)
    found = checkpoint.problems(made.directory, EXPECT)
    assert len(found) == checkpoint.MAX_LISTED + 1
    assert found[0] == (f"{where(made, 'model.safetensors.index.json')}: weight_map has no "
                        "'model.layers.2.mlp.experts.0.gate_proj.weight' (layer 2 of num_hidden_layers 4: expert 0 of "
                        f"num_experts 4). {FIX}")
    assert found[-1] == (f"{where(made, 'model.safetensors.index.json')}: 2 more tensors SGLang loads are missing "
                         f"from weight_map (expected every one, for the counts config.json states). {FIX}")


def test_a_missing_layer_is_named(tmp_path):
    cfg = ck.config()
    made = ck.build(tmp_path / "m", cfg, names=[t for t in ck.tensor_names(cfg) if ".layers.3." not in t])
    found = checkpoint.problems(made.directory, EXPECT)
    assert found[0].endswith("weight_map has no 'model.layers.3.input_layernorm.weight' (layer 3 of num_hidden_layers "
                             f"4: its input_layernorm). {FIX}")


@pytest.mark.parametrize("value, shown", [("four", "'four'"), (True, "True"), (-1, "-1"), (None, "None")])
def test_a_config_count_that_is_no_count(tmp_path, value, shown):
    made = ck.build(tmp_path / "m", ck.config(num_experts=value), names=ck.tensor_names(ck.config()))
    assert fault(made) == f"{where(made, 'config.json')}: num_experts {shown}, expected an integer 1..65536. {FIX}"


def test_an_absurd_header_length(made):
    path = made.directory / SECOND
    path.write_bytes(struct.pack("<Q", 2**63) + path.read_bytes()[8:])
    assert fault(made) == (f"{where(made, SECOND)}: safetensors header length {2**63} bytes, above safetensors' own "
                           f"limit of 100000000 (not a safetensors file, or a corrupt one). {FIX}")


@pytest.mark.parametrize("entry, problem", [
    ({"dtype": "Q4", "shape": [2], "data_offsets": [0, 2]}, "has dtype 'Q4', expected one of safetensors' (BOOL,"),
    ({"dtype": "U8", "shape": [3], "data_offsets": [0, 2]}, "spans 2 bytes, but U8 [3] needs 3"),
    ({"dtype": "U8", "shape": [2], "data_offsets": [2, 0]}, "has data_offsets [2, 0], expected [begin, end]"),
    ({"dtype": "U8", "shape": "2", "data_offsets": [0, 2]}, "has shape '2', expected at most 16 non-negative"),
    ([1, 2], "is a JSON list, expected an object with dtype, shape and data_offsets"),
    ({"dtype": ["U8"], "shape": [2], "data_offsets": [0, 2]}, "has dtype ['U8'], expected one of"),
    ({"dtype": "U8", "shape": [True, 2], "data_offsets": [0, 2]}, "has shape [True, 2], expected at most 16"),
])
def test_a_header_entry_safetensors_would_refuse(made, entry, problem):
    header = {"model.norm.weight": entry}
    text = json.dumps(header).encode()
    path = made.directory / FIRST
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"\0\0")
    line = fault(made)
    assert line.startswith(f"{where(made, FIRST)}: safetensors header entry 'model.norm.weight' {problem}")
    assert line.endswith(FIX)


def test_overlapping_tensors(made):
    header = {"a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]},
              "b": {"dtype": "U8", "shape": [2], "data_offsets": [1, 3]}}
    text = json.dumps(header).encode()
    (made.directory / FIRST).write_bytes(struct.pack("<Q", len(text)) + text + b"\0\0\0")
    found = checkpoint.problems(made.directory, EXPECT)
    assert found[0] == (f"{where(made, FIRST)}: safetensors header puts 'b' at byte 1 of the data, expected 2 "
                        f"(tensors overlap or leave a gap). {FIX}")


def test_a_header_that_is_no_json(made):
    (made.directory / FIRST).write_bytes(struct.pack("<Q", 4) + b"\xff\xfe{[" + b"\0" * 4)
    assert fault(made).startswith(f"{where(made, FIRST)}: safetensors header is not JSON (UnicodeDecodeError: ")


def test_an_index_shard_outside_the_directory(made):
    made.weight_map["model.norm.weight"] = "../elsewhere/x.safetensors"
    made.write_index()
    assert fault(made) == (
        f"{where(made, 'model.safetensors.index.json')}: weight_map puts 'model.norm.weight' in "
        "'../elsewhere/x.safetensors', expected a *.safetensors file directly in the checkpoint directory (SGLang "
        f"loads no other). {FIX}")


def test_a_corrupt_shard_of_the_right_size_is_found_by_the_full_proof(made):
    path = made.directory / SECOND
    content = bytearray(path.read_bytes())
    expected = fileproof.metadata(made.directory, SECOND)[1]
    content[-1] ^= 0xFF  # a data byte: the header still accounts for the size
    path.write_bytes(bytes(content))
    assert checkpoint.problems(made.directory, EXPECT) == [], "the quick preflight reads headers, not data"
    report = checkpoint.check(made.directory, EXPECT, full=True)
    import hashlib

    assert report.problems == [f"{where(made, SECOND)}: SHA-256 {hashlib.sha256(content).hexdigest()}, expected "
                               f"{expected} as downloaded (corrupt or edited file). {FIX}"]
    assert report.tally.mismatched == [SECOND]


def test_an_edited_config_is_found_by_the_quick_preflight(made):
    path = made.directory / "config.json"
    path.write_text(path.read_text().replace('"num_experts_per_tok": 2', '"num_experts_per_tok": 3'))
    assert "config.json': git blob SHA-1 " in fault(made)


def test_a_deleted_recorded_file(made):
    (made.directory / "generation_config.json").unlink()
    assert fault(made) == (f"{where(made, 'generation_config.json')}: missing, but the download recorded it "
                           f"(expected every downloaded file). {FIX}")


def test_missing_directory(tmp_path):
    assert checkpoint.problems(tmp_path / "absent", EXPECT) == [
        f"{str(tmp_path / 'absent')!r}: no checkpoint directory (expected inclusionAI/Ling-3.0-flash-fp4 at "
        f"{ck.REVISION[:12]}). {FIX} (or point SPARKGATE_MODEL_DIR at it)"]


def test_an_oversized_index_is_not_read_whole(made, monkeypatch):
    monkeypatch.setattr(checkpoint, "MAX_INDEX_BYTES", 1000)
    assert fault(made) == (f"{where(made, 'model.safetensors.index.json')}: larger than 1000 bytes (expected a "
                           f"safetensors index). {FIX}")


# --- an unpinned profile: the directory's own commit, consistently -----------------------------------------------


UNPINNED = checkpoint.Expect(ck.REPO, None, ck.ARCHITECTURE, mtp=True, humming=True, pull=PULL)


def test_unpinned_the_directorys_own_commit_passes_and_says_so(made):
    report = checkpoint.check(made.directory, UNPINNED)
    assert report.problems == [] and report.commit == ck.REVISION
    assert "(model.revision unset: pin it to refuse any other commit)" in report.summary(made.directory, UNPINNED)


def test_unpinned_a_file_from_another_commit_is_refused(made):
    ck.record(made.directory, "README.md", (made.directory / "README.md").read_bytes(), ck.OTHER_REVISION)
    assert fault(made, UNPINNED) == (
        f"{where(made, 'README.md')}: downloaded at revision '{ck.OTHER_REVISION}', expected {ck.REVISION} (the commit "
        f"config.json was downloaded at; model.revision pins none). {FIX}")


# --- in the deploy preflight -------------------------------------------------------------------------------------


def test_the_preflight_finding_reads_the_directory_from_the_environment(made, monkeypatch):
    monkeypatch.setenv("SPARKGATE_MODEL_DIR", str(made.directory))
    [finding] = preflight.model_checkpoint(profiles.load("all-three").profile, "all-three")
    assert finding.ok and finding.check == "model checkpoint" and "BailingMoeV3ForCausalLM at 3f1c2b7d9e8a" in str(finding)
    (made.directory / "modeling_evil.py").write_text("")
    [refused] = preflight.model_checkpoint(profiles.load("all-three").profile, "all-three")
    assert str(refused).startswith("[FAIL] model checkpoint: ") and "modeling_evil.py" in refused.detail


def test_a_spark_deploy_with_a_broken_checkpoint_is_refused_before_anything_is_touched(made, tmp_path, monkeypatch):
    from tests.unit.test_deploy_order import FakeDocker, deploy_mod, options  # the deploy-order harness

    fake = FakeDocker(gateway_port=None, running=False)
    monkeypatch.setattr(preflight.docker_cli, "run", fake)
    # This host is no Spark: its facts pass, the checkpoint they found is judged.
    monkeypatch.setattr(preflight, "spark_host", lambda *a, **k: [preflight.PreflightFinding("model", True, "found")])
    monkeypatch.setenv("SPARKGATE_MODEL_DIR", str(made.directory))
    drop(made, "model.layers.4.hnorm.weight")
    lines: list[str] = []
    with pytest.raises(deploy_mod.DeployRefused) as refused:
        deploy_mod.deploy(options(tmp_path, 1, profile="all-three", target="spark"), say=lines.append)
    message = str(refused.value)
    assert message.startswith("preflight failed: model checkpoint: ") and "'model.layers.4.hnorm.weight'" in message
    assert message.endswith(f"{FIX}") and "\n" not in message
    assert fake.calls == [], "nothing rendered, stopped or started"
    assert any(line.strip().startswith("[FAIL] model checkpoint:") for line in lines)
