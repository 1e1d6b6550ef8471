"""`sllm bench agreement`'s measure: greedy answers agree until their first difference, not after it."""

from benchmarks.agreement import agreement, common_prefix


def test_common_prefix_stops_at_the_first_difference():
    assert common_prefix([1, 2, 3, 4], [1, 2, 9, 4]) == 2  # the 4 after the difference does not count
    assert common_prefix([1, 2], [1, 2, 3]) == 2
    assert common_prefix([], [1]) == 0


def test_agreement_sums_prefixes_over_the_longer_answers_and_counts_whole_matches():
    a = [[1, 2, 3], [5, 6, 7], [8, 9]]
    b = [[1, 2, 3], [5, 0, 7], [8, 9, 10]]
    assert agreement(a, b) == (3 + 1 + 2, 3 + 3 + 3, 1, 3)
