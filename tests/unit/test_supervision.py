"""P-3: restart backoff 1 s doubling to 30 s."""

from receipt_site.supervision import next_backoff


def test_backoff_starts_at_one_second_and_doubles_to_thirty():
    seen, current = [], None
    for _ in range(8):
        current = next_backoff(current)
        seen.append(current)
    assert seen == [1, 2, 4, 8, 16, 30, 30, 30]
