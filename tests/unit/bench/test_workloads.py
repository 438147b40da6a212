from pathlib import Path

import pytest

from sparkgate.bench import answers, workloads

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
    numbers = [int(n) for n in answers._ANY_NUMBER.findall(question)]
    assert numbers[1] // numbers[0] == int(item.expected) and numbers[1] % numbers[0] == 0


def test_prompts_are_five_shot_and_end_with_the_question():
    item = workloads.arith(1).items[0]
    assert item.prompt.count("Question: ") == 6 and item.prompt.count("\n#### ") == 5
    assert item.prompt.endswith("Answer:")
    assert all(answers.reference_answer(shot) for _, shot in workloads.DEFAULT_SHOTS)


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
