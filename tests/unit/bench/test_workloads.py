from pathlib import Path

import pytest

from sparkgate.bench import gsm8k_scoring, workloads

SAMPLE = Path(__file__).resolve().parents[2] / "fixtures" / "bench" / "gsm8k-sample.jsonl"


def test_arith_is_seeded_and_scored():
    one, again, other = workloads.arith(10, seed=7), workloads.arith(10, seed=7), workloads.arith(10, seed=8)
    assert one.fingerprint() == again.fingerprint() != other.fingerprint()
    assert len(one.items) == 10 and one.scored and not one.fixed_length
    assert all(item.expected and int(item.expected) > 0 for item in one.items)
    assert len({item.id for item in one.items}) == 10


def test_arith_answers_follow_from_the_question():
    # the sharing template: "<f> friends share <f * e> stickers equally" -> e
    item = workloads.arith(10, seed=3).items[3]
    question = item.prompt.rsplit("Question: ", 1)[1]
    numbers = [int(n) for n in gsm8k_scoring._ANY_NUMBER.findall(question)]
    assert numbers[1] // numbers[0] == int(item.expected) and numbers[1] % numbers[0] == 0


def test_prompts_are_five_shot_and_end_with_the_question():
    item = workloads.arith(1).items[0]
    assert item.prompt.count("Question: ") == 6 and item.prompt.count("\n#### ") == 5
    assert item.prompt.endswith("Answer:")
    assert all(gsm8k_scoring.reference_answer(shot) for _, shot in workloads.DEFAULT_SHOTS)


def test_gsm8k_loader(tmp_path):
    workload = workloads.gsm8k(SAMPLE)
    assert [i.expected for i in workload.items] == ["55", "75", "12", "40", "25"]
    assert workload.source["questions"] == 5 and len(workload.source["jsonl_sha256"]) == 64
    assert workload.limited(2).items == workload.items[:2]
    assert workload.limited(2).fingerprint() != workload.fingerprint()
    shots = workloads.gsm8k(SAMPLE, shots_path=SAMPLE).items[0].prompt
    assert "A library has 3 shelves" in shots.split("Question: ")[1]


@pytest.mark.parametrize(
    ("content", "message"),
    [("", "no questions"), ("{bad json\n", "not JSON"), ('{"question": "q"}\n', "string fields"),
     ('{"question": "q", "answer": "no number"}\n', "no '#### <number>'")],
)
def test_gsm8k_loader_refuses_bad_files(tmp_path, content, message):
    path = tmp_path / "test.jsonl"
    path.write_text(content)
    with pytest.raises(workloads.WorkloadError, match=message):
        workloads.gsm8k(path)


def test_build_and_synthetic():
    synthetic = workloads.build("synthetic", count=4, seed=1)
    assert synthetic.fixed_length and not synthetic.scored and all(i.expected is None for i in synthetic.items)
    assert synthetic.fingerprint() == workloads.synthetic(4, 1).fingerprint()
    with pytest.raises(workloads.WorkloadError, match="--jsonl"):
        workloads.build("gsm8k")
    with pytest.raises(workloads.WorkloadError, match="unknown workload"):
        workloads.build("mmlu")


def test_code_and_prose_are_fixed_and_fingerprinted():
    code, prose = workloads.build("code"), workloads.build("prose")
    # pinned: editing a prompt changes the prompt set, and runs before and after the edit must not pair
    assert (code.fingerprint(), prose.fingerprint()) == ("8b1a672b4d597a82", "8c9767a41c283dff")
    assert code.fingerprint() == workloads.code().fingerprint() and prose.fingerprint() == workloads.prose().fingerprint()
    for workload in (code, prose):
        assert len(workload.items) == 20 and len({item.id for item in workload.items}) == 20
        assert not workload.scored and not workload.fixed_length and all(i.expected is None for i in workload.items)
        assert workload.default_sampling == "greedy" and workload.default_max_tokens == 512
    assert workloads.build("code", count=8).items == code.items[:8]
    assert workloads.build("code", count=8).fingerprint() != code.fingerprint()
    assert workloads.arith(4).default_sampling == "sampled"  # the published protocol stays the default there
    with pytest.raises(workloads.WorkloadError, match="--count 21: the prose workload has 20 prompts"):
        workloads.build("prose", count=21)


def test_code_and_prose_content_contract():
    """What the simulator's timing model and a drafter see: code asks for a Python function with a `def `
    signature and a docstring; prose asks for writing, with no code, no digits and no arithmetic question."""
    import re

    for item in workloads.code().items:
        assert item.prompt.startswith("Complete the following Python function")
        assert re.search(r"^def \w+\(.*\).*:$", item.prompt, re.MULTILINE) and item.prompt.count('"""') == 2
        assert "####" not in item.prompt and "Answer step by step" not in item.prompt
    for item in workloads.prose().items:
        assert re.match(r"(Write|Explain|Summarize|Describe|Give a summary)\b", item.prompt), item.prompt
        assert "def " not in item.prompt and "```" not in item.prompt and not re.search(r"\d", item.prompt)
        assert not re.search(r"(?i)python|function|code|how many|how much|calculate|step by step", item.prompt)


def test_user_prompts_from_jsonl(tmp_path):
    path = tmp_path / "mine.jsonl"
    path.write_text('{"prompt": "Complete def f(x):"}\n\n{"id": "mine-2", "prompt": "def g():"}\n')
    workload = workloads.build("code", jsonl=path)
    assert [i.id for i in workload.items] == ["code-jsonl-0000", "mine-2"]
    assert workload.source["prompts"] == 2 and len(workload.source["jsonl_sha256"]) == 64
    assert workload.default_sampling == "greedy" and not workload.scored
    for content, message in [("", "no prompts"), ("{bad\n", "not JSON"), ('{"question": "q"}\n', "'prompt'"),
                             ('{"prompt": "a", "id": "x"}\n{"prompt": "b", "id": "x"}\n', "duplicate id")]:
        path.write_text(content)
        with pytest.raises(workloads.WorkloadError, match=message):
            workloads.build("prose", jsonl=path)


def test_workload_lists():
    assert workloads.expand("code") == ["code"]
    assert workloads.expand("all") == ["arith", "code", "prose"]
    assert workloads.expand("prose, code,prose") == ["prose", "code"]
    for bad, message in [("mmlu", "unknown workload 'mmlu'"), (",", "names no workload")]:
        with pytest.raises(workloads.WorkloadError, match=message):
            workloads.expand(bad)
