"""The fixed prompt texts of the `code` and `prose` workloads, written for sparkgate (no external data).

- CODE: HumanEval-style. Each item is a Python function signature with its docstring (and doctest
  examples); the model is asked to complete the function. Every prompt contains a `def ` signature.
- PROSE: Alpaca-style natural-language writing requests (explain, summarize, write a letter or an
  essay). No code, no digits, no arithmetic question.

Drafters accept very differently on the two (published DSpark accept length 6.57 on HumanEval against
3.51 on Alpaca), which is why the bench measures them apart. Changing a text changes the workload's
fingerprint, so runs made before and after the change are not paired.
"""

from __future__ import annotations

CODE_INSTRUCTION = "Complete the following Python function. Reply with the whole function in one Python code block."

# (id, signature with docstring)
CODE_FUNCTIONS: tuple[tuple[str, str], ...] = (
    ("running-max", '''def running_max(values: list[int]) -> list[int]:
    """Return a list whose i-th element is the largest of values[0], ..., values[i].

    >>> running_max([1, 3, 2, 5, 4])
    [1, 3, 3, 5, 5]
    >>> running_max([])
    []
    """'''),
    ("is-palindrome", '''def is_palindrome(text: str) -> bool:
    """Return True if text reads the same forwards and backwards, ignoring case and every character
    that is not a letter or a digit.

    >>> is_palindrome("A man, a plan, a canal: Panama")
    True
    >>> is_palindrome("sparkgate")
    False
    """'''),
    ("chunked", '''def chunked(items: list, size: int) -> list[list]:
    """Split items into consecutive lists of length size; the last list may be shorter.
    Raise ValueError when size is not positive.

    >>> chunked([1, 2, 3, 4, 5], 2)
    [[1, 2], [3, 4], [5]]
    """'''),
    ("word-frequencies", '''def word_frequencies(text: str) -> dict[str, int]:
    """Count how often each word occurs in text. Words are compared in lower case and split on
    whitespace; leading and trailing punctuation is stripped from each word.

    >>> word_frequencies("The cat saw the dog.")
    {'the': 2, 'cat': 1, 'saw': 1, 'dog': 1}
    """'''),
    ("merge-intervals", '''def merge_intervals(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Merge overlapping closed intervals and return them sorted by start.

    >>> merge_intervals([(1, 3), (2, 6), (8, 10), (15, 18)])
    [(1, 6), (8, 10), (15, 18)]
    >>> merge_intervals([(1, 4), (4, 5)])
    [(1, 5)]
    """'''),
    ("roman-to-int", '''def roman_to_int(numeral: str) -> int:
    """Convert a Roman numeral (I, V, X, L, C, D, M, with subtractive pairs such as IV and CM)
    to an integer.

    >>> roman_to_int("MCMXCIV")
    1994
    >>> roman_to_int("LVIII")
    58
    """'''),
    ("flatten", '''def flatten(nested: list) -> list:
    """Flatten arbitrarily nested lists into one list, keeping the order of the leaves.

    >>> flatten([1, [2, [3, 4]], [], 5])
    [1, 2, 3, 4, 5]
    """'''),
    ("balanced-brackets", '''def balanced_brackets(text: str) -> bool:
    """Return True if every (, [ and { in text is closed by the matching bracket in the right
    order. Other characters are ignored.

    >>> balanced_brackets("f(a[0], {b: c})")
    True
    >>> balanced_brackets("(]")
    False
    """'''),
    ("top-k", '''def top_k_frequent(values: list[int], k: int) -> list[int]:
    """Return the k most frequent values, most frequent first; ties are broken by the smaller value.

    >>> top_k_frequent([4, 1, 1, 2, 2, 2, 3], 2)
    [2, 1]
    """'''),
    ("rotate-matrix", '''def rotate_clockwise(matrix: list[list[int]]) -> list[list[int]]:
    """Return a new square matrix rotated by 90 degrees clockwise. The input is not modified.

    >>> rotate_clockwise([[1, 2], [3, 4]])
    [[3, 1], [4, 2]]
    """'''),
    ("parse-duration", '''def parse_duration(text: str) -> int:
    """Parse a duration such as "1h30m", "45s" or "2h5s" into seconds. Units are h, m and s, each
    at most once and in that order. Raise ValueError on anything else.

    >>> parse_duration("1h30m")
    5400
    >>> parse_duration("45s")
    45
    """'''),
    ("camel-to-snake", '''def camel_to_snake(name: str) -> str:
    """Convert a CamelCase or camelCase identifier to snake_case. Runs of capitals are kept
    together as one word.

    >>> camel_to_snake("parseHTTPResponse")
    'parse_http_response'
    >>> camel_to_snake("DeployRecord")
    'deploy_record'
    """'''),
    ("binary-search", '''def find_first(sorted_values: list[int], target: int) -> int:
    """Return the index of the first occurrence of target in sorted_values, or -1 when it is absent.
    Use binary search.

    >>> find_first([1, 2, 2, 2, 5], 2)
    1
    >>> find_first([1, 3], 2)
    -1
    """'''),
    ("group-anagrams", '''def group_anagrams(words: list[str]) -> list[list[str]]:
    """Group words that are anagrams of each other. Each group keeps the input order, and groups
    are ordered by their first word's position in the input.

    >>> group_anagrams(["eat", "tea", "tan", "ate", "nat", "bat"])
    [['eat', 'tea', 'ate'], ['tan', 'nat'], ['bat']]
    """'''),
    ("lru-cache", '''def lru_simulate(capacity: int, keys: list[str]) -> list[str]:
    """Simulate a least-recently-used cache of the given capacity over the sequence of key accesses
    and return the keys evicted, in eviction order.

    >>> lru_simulate(2, ["a", "b", "a", "c", "b"])
    ['b', 'a']
    """'''),
    ("dedupe-ordered", '''def dedupe(items: list) -> list:
    """Remove duplicates from items, keeping the first occurrence of each and the original order.
    Items may be unhashable (for example lists).

    >>> dedupe([3, 1, 3, [2], 1, [2]])
    [3, 1, [2]]
    """'''),
    ("semver-compare", '''def compare_versions(a: str, b: str) -> int:
    """Compare two dotted version strings numerically ("1.10.0" is newer than "1.9"). Missing
    parts count as zero. Return -1 if a is older, 0 if equal and 1 if a is newer.

    >>> compare_versions("1.10.0", "1.9")
    1
    >>> compare_versions("2.0", "2.0.0")
    0
    """'''),
    ("moving-average", '''def moving_average(values: list[float], window: int) -> list[float]:
    """Return the mean of each full window of consecutive values, in order. Raise ValueError when
    window is not between 1 and len(values).

    >>> moving_average([1.0, 2.0, 3.0, 4.0], 2)
    [1.5, 2.5, 3.5]
    """'''),
    ("spiral-order", '''def spiral_order(matrix: list[list[int]]) -> list[int]:
    """Return the elements of a rectangular matrix in clockwise spiral order, starting at the top left.

    >>> spiral_order([[1, 2, 3], [4, 5, 6], [7, 8, 9]])
    [1, 2, 3, 6, 9, 8, 7, 4, 5]
    """'''),
    ("shortest-path", '''def shortest_path(graph: dict[str, list[str]], start: str, goal: str) -> list[str]:
    """Return a shortest path from start to goal in an unweighted directed graph given as adjacency
    lists, as the list of nodes visited (start and goal included), or [] when goal is unreachable.

    >>> shortest_path({"a": ["b", "c"], "b": ["d"], "c": ["d"], "d": []}, "a", "d")
    ['a', 'b', 'd']
    """'''),
)

# (id, request). No digits, no code, no arithmetic: natural-language writing only.
PROSE_REQUESTS: tuple[tuple[str, str], ...] = (
    ("essay-libraries", "Write a short essay on why public libraries still matter in an age of search engines."),
    ("explain-tides", "Explain to a curious teenager what causes ocean tides and why they differ from place to place."),
    ("letter-neighbour", "Write a friendly letter to a new neighbour, welcoming them to the street and offering "
                         "to show them around the area."),
    ("summary-industrial", "Summarize the main causes and consequences of the Industrial Revolution for a "
                           "general reader."),
    ("explain-vaccines", "Explain in plain language how vaccines teach the immune system to recognise a disease."),
    ("essay-walking", "Write an essay about the pleasures of walking in a city at night."),
    ("letter-complaint", "Write a polite but firm letter to a landlord asking them to repair a leaking roof "
                         "before the rainy season."),
    ("explain-photosynthesis", "Describe how photosynthesis works and why it matters for life on Earth."),
    ("summary-odyssey", "Give a summary of the story of the Odyssey and explain why it is still read today."),
    ("essay-remote-work", "Write a balanced essay on the advantages and drawbacks of working from home."),
    ("explain-inflation", "Explain what inflation is, what tends to cause it, and how it affects ordinary "
                          "households, without using any formulas."),
    ("letter-reference", "Write a warm reference letter for a former colleague who is applying to lead a "
                         "community garden project."),
    ("describe-market", "Describe a busy morning at an open-air fruit market, appealing to all five senses."),
    ("explain-sleep", "Explain why sleep is important for memory and learning, in a tone suitable for a "
                      "school newsletter."),
    ("summary-renaissance", "Summarize what the Renaissance was and how it changed European art and thought."),
    ("essay-failure", "Write a reflective essay on what people can learn from failure."),
    ("letter-thanks", "Write a thank-you letter to a teacher who made a lasting difference in your life."),
    ("explain-bees", "Explain why bees are important to farming and what threatens them today."),
    ("story-lighthouse", "Write a short story about a lighthouse keeper who finds an unexpected visitor on the "
                         "rocks after a storm."),
    ("explain-democracy", "Explain the idea of the separation of powers in a democracy and why many "
                          "constitutions adopt it."),
)


def code_prompt(signature: str) -> str:
    return f"{CODE_INSTRUCTION}\n\n```python\n{signature}\n```"
