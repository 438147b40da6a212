"""Profile files are read strictly: a key written twice, a file that is not UTF-8 (or is UTF-16/32), an oversized
file and an absurd numeric setting are each refused in one line naming the file, the field or line, and the fix;
a UTF-8 byte-order mark is harmless. Property-based: any duplicated key in a shipped profile is refused, and no
byte string ends in anything but a load or a one-line refusal."""

from __future__ import annotations

import codecs

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparkgate.paths import profiles_dir
from sparkgate.profile import loading as profiles
from sparkgate.profile.problems import ProfileError

HEAD = "name: user\ndescription: test profile\nextends: [all-three]\n"


def refusal(path) -> str:
    with pytest.raises(ProfileError) as refused:
        profiles.load(str(path))
    message = str(refused.value)
    assert "\n" not in message.strip() and "Traceback" not in message
    return message


def write(tmp_path, data: bytes | str):
    path = tmp_path / "user.yaml"
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


@pytest.mark.parametrize("body, field, line, first", [
    ("optimizations:\n  fp8_lm_head:\n    enabled: true\n  fp8_lm_head:\n    enabled: false\n",
     "optimizations.fp8_lm_head", 7, 5),
    ("gate:\n  watch:\n    stall_after_s: 30\n    stall_after_s: 50\n", "gate.watch.stall_after_s", 7, 6),
    ("description: again\n", "description", 4, 2),
    ("env:\n  SGLANG_X: a\n  SGLANG_X: b\n", "env.SGLANG_X", 6, 5),
])
def test_a_key_written_twice_is_refused_with_both_lines(tmp_path, body, field, line, first):
    message = refusal(write(tmp_path, HEAD + body))
    key = field.rpartition(".")[2]
    assert message == (f"{tmp_path / 'user.yaml'}: {field}: line {line}: key {key!r} is written twice (first at "
                       f"line {first}); YAML would keep only the last. Fix: keep one of them")


def test_a_file_that_is_not_utf8_is_refused_at_its_line(tmp_path):
    message = refusal(write(tmp_path, (HEAD + "gate:\n  min_decode_tok_s: 40 # caf\xe9\n").encode("latin-1")))
    offset = len((HEAD + "gate:\n  min_decode_tok_s: 40 # caf").encode())
    assert message == (f"{tmp_path / 'user.yaml'}: line 5: is not UTF-8 (byte 0xe9 at offset {offset}). "
                       "Fix: save the file as UTF-8")


@pytest.mark.parametrize("encoding, bom", [("utf-16", "UTF-16"), ("utf-16-be", "UTF-16"), ("utf-32", "UTF-32")])
def test_a_file_saved_as_utf16_or_utf32_is_refused_by_name(tmp_path, encoding, bom):
    data = HEAD.encode(encoding)
    if not data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE, codecs.BOM_UTF32_LE)):
        data = codecs.BOM_UTF16_BE + data  # utf-16-be writes no mark of its own
    message = refusal(write(tmp_path, data))
    assert f": (file): is saved as {bom} (byte-order mark" in message and message.endswith("Fix: save it as UTF-8")


def test_a_utf8_byte_order_mark_is_dropped_and_the_profile_loads_the_same(tmp_path):
    plain = profiles.load(str(write(tmp_path, HEAD)))
    marked = profiles.load(str(write(tmp_path, codecs.BOM_UTF8 + HEAD.encode())))
    assert marked.plan.argv == plain.plan.argv and marked.profile == plain.profile


def test_an_oversized_file_is_refused_before_it_is_parsed(tmp_path):
    message = refusal(write(tmp_path, HEAD + "#" * profiles.MAX_PROFILE_BYTES))
    assert "more than a profile needs" in message


@pytest.mark.parametrize(("body", "complaint"), [
    ("env: &e {SGLANG_X: a}\n", "uses a YAML anchor or alias"),
    ("description: &d x\nname: *d\n", "uses a YAML anchor or alias"),
    ("env: &a [*a]\n", "uses a YAML anchor or alias"),  # refers to itself: composing it would recurse
    ("x: " + "[" * 20000 + "]" * 20000 + "\n", "nests deeper than 16 levels"),  # libyaml's composer crashed on it
    # A syntax error libyaml finds first must not let deep nesting past the check (pure Python's composer recursed).
    ("%YAML 1.3\n---\nz: " + "[" * 60000, "not valid YAML"),
    ("sglang: {enable_fp32_lm_head: false, <<: {enable_fp32_lm_head: true}}\n", "uses a YAML merge key (<<)"),
    ("description: !!binary aGVsbG8=\n", "uses a YAML tag (tag:yaml.org,2002:binary)"),
    ("x: !!bool maybe\n", "uses a YAML tag"),
    ("x: 2001-13-45\n", "holds a value YAML cannot read (ValueError: month must be in 1..12)"),
    ("x: " + "9" * 5000 + "\n", "holds a value YAML cannot read (ValueError: Exceeds the limit"),
])
def test_anchors_aliases_tags_merges_and_deep_nesting_are_refused_in_one_line(tmp_path, body, complaint):
    assert complaint in refusal(write(tmp_path, HEAD + body))


@pytest.mark.parametrize("body, field, bound", [
    ("gate:\n  calibration:\n    max_new_tokens: 1000000000\n", "gate.calibration.max_new_tokens", "2048"),
    ("gate:\n  calibration:\n    prompts: 1000\n", "gate.calibration.prompts", "16"),
    ("gate:\n  calibration:\n    time_budget_s: 1e9\n", "gate.calibration.time_budget_s", "600"),
    ("gate:\n  baseline_decode_tok_s: .inf\n", "gate.baseline_decode_tok_s", "1000"),
    ("gate:\n  min_decode_tok_s: 1e12\n", "gate.min_decode_tok_s", "1000"),
    ("gate:\n  watch:\n    stall_after_s: 1e9\n", "gate.watch.stall_after_s", "3600"),
    ("gate:\n  watch:\n    min_mem_available_gib: 1e9\n", "gate.watch.min_mem_available_gib", "128"),
    ("gate:\n  watch:\n    max_swap_growth_mib: 1e12\n", "gate.watch.max_swap_growth_mib", "65536"),
    ("optimizations:\n  mtp:\n    min_accept_length: 1e9\n", "optimizations.mtp.min_accept_length", "64"),
    ("optimizations:\n  mtp:\n    num_steps: 1000\n", "optimizations.mtp.num_steps", "16"),
    ("optimizations:\n  dspark:\n    min_decode_tok_s: 1e9\n", "optimizations.dspark.min_decode_tok_s", "1000"),
    ("optimizations:\n  dspark:\n    block_size: 4096\n", "optimizations.dspark.block_size", "64"),
])
def test_absurd_upper_values_are_refused_naming_the_field_and_the_bound(tmp_path, body, field, bound):
    message = refusal(write(tmp_path, HEAD + body))
    assert f": {field}: Input should be less than or equal to {bound}" in message


@pytest.mark.parametrize(("body", "field", "complaint"), [
    # Quoted numbers, booleans for numbers and words for booleans are a typo or a template gone wrong, never
    # read as what they might mean (pydantic's lax mode would take "5" as 5.0 and "yes" as true).
    ("gate:\n  watch:\n    stall_after_s: \"30\"\n", "gate.watch.stall_after_s", "a valid number"),
    ("gate:\n  watch:\n    max_swap_growth_mib: true\n", "gate.watch.max_swap_growth_mib", "a valid number"),
    ("gateway:\n  max_body_mib: \"16\"\n", "gateway.max_body_mib", "a valid number"),
    ("optimizations:\n  mtp:\n    num_steps: \"3\"\n", "optimizations.mtp.num_steps", "a valid integer"),
    ("optimizations:\n  mtp:\n    num_steps: 3.0\n", "optimizations.mtp.num_steps", "a valid integer"),
    ("optimizations:\n  humming:\n    enabled: \"yes\"\n", "optimizations.humming.enabled", "a valid boolean"),
    ("sglang:\n  trust_remote_code: 1\n", "sglang.trust_remote_code", "a valid boolean"),
])
def test_a_value_of_the_wrong_yaml_type_is_refused_not_coerced(tmp_path, body, field, complaint):
    message = refusal(write(tmp_path, HEAD + body))
    assert f": {field}: Input should be {complaint}" in message and len(message.splitlines()) == 1, message


def test_an_exponent_without_a_dot_reads_as_a_number_as_in_yaml_1_2(tmp_path):
    loaded = profiles.load(str(write(tmp_path, HEAD + "gate:\n  watch:\n    stall_after_s: 3e1\n")))
    assert loaded.profile.gate.watch.stall_after_s == 30.0


def test_not_a_number_is_refused(tmp_path):
    message = refusal(write(tmp_path, HEAD + "gate:\n  baseline_decode_tok_s: .nan\n"))
    assert ": gate.baseline_decode_tok_s: " in message


SHIPPED = sorted(p for p in profiles_dir().glob("*.yaml"))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_key_of_a_shipped_profile_written_twice_is_refused(tmp_path, data):
    source = data.draw(st.sampled_from(SHIPPED))
    lines = source.read_text(encoding="utf-8").splitlines(keepends=True)
    # Lines holding a key with its value on the same line (`key: value`), written again right after themselves.
    keyed = [i for i, line in enumerate(lines)
             if ": " in line and not line.lstrip().startswith(("#", "-")) and line.split(": ", 1)[1].strip()]
    index = data.draw(st.sampled_from(keyed))
    text = "".join(lines[: index + 1]) + lines[index] + "".join(lines[index + 1:])
    path = tmp_path / source.name
    path.write_text(text, encoding="utf-8")
    message = refusal(path)
    assert "is written twice" in message and f"line {index + 2}" in message


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.binary(max_size=300), prefix=st.sampled_from([b"", codecs.BOM_UTF8, b"name: user\n"]))
def test_no_bytes_end_in_anything_but_a_load_or_a_one_line_refusal(tmp_path, raw, prefix):
    path = write(tmp_path, prefix + raw)
    try:
        profiles.load(str(path))
    except ProfileError as refused:
        lines = str(refused).strip().splitlines()  # one line per problem, each naming the file
        assert lines and all(line.startswith(f"{path}: ") for line in lines)
