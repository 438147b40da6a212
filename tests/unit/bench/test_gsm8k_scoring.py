import pytest

from sparkgate.bench import gsm8k_scoring


@pytest.mark.parametrize(
    ("text", "value", "how"),
    [
        ("She has 12 + 6 = 18 apples.\n#### 18", "18", "####"),
        ("#### 1,234\nQuestion: next one #### 99", "1234", "####"),  # the first #### wins
        ("The total is $1,200.\n####  $1,200", "1200", "####"),
        ("So x = -3.\n#### -3", "-3", "####"),
        ("The answer is \\boxed{42}. Earlier I had 40.", "42", "boxed"),
        ("First 3 then 7 then 2,500 then 19.", "19", "last-number"),
        ("It costs 3.50 dollars.", "3.50", "last-number"),
        ("no digits at all", None, "none"),
        ("", None, "none"),
    ],
)
def test_extract(text, value, how):
    assert gsm8k_scoring.extract(text) == (value, how)


def test_reference_answer_is_the_number_after_hashes():
    assert gsm8k_scoring.reference_answer("Natalia sold 48/2 = <<48/2=24>>24 clips.\n#### 72") == "72"
    assert gsm8k_scoring.reference_answer("... #### 1,000") == "1000"
    assert gsm8k_scoring.reference_answer("no final line") is None


@pytest.mark.parametrize(
    ("got", "want", "ok"),
    [("18", "18", True), ("18.00", "18", True), ("1,200", "1200", True), ("$5", "5", True), ("18.", "18", True),
     ("17", "18", False), (None, "18", False), ("18", None, False), ("abc", "18", False)],
)
def test_is_correct_compares_numbers(got, want, ok):
    assert gsm8k_scoring.is_correct(got, want) is ok
