"""DraftPacing: a draft at most one longer than what the last verification accepted (doubling back to k while
all is accepted); after a verification that accepted none, a pause that doubles up to MAX_PAUSE, ended by an
accepted draft."""

import pytest

from tinyllm.errors import TinyLLMError
from tinyllm.speculative.pacing import MAX_PAUSE, DraftPacing
from tinyllm.speculative.proposer import SpeculativeConfig


def paused_steps(p: DraftPacing) -> int:
    n = 0
    while p.next_length() == 0:
        n += 1
    return n


def test_lengths_follow_what_was_accepted():
    p = DraftPacing(4)
    assert p.next_length() == 4 and p.next_length() == 4  # nothing verified yet: k every step
    p.record(4, 4)
    assert p.next_length() == 4  # all accepted: stays at k
    p.record(4, 1)
    assert p.next_length() == 2  # one accepted: at most two next
    p.record(2, 2)
    assert p.next_length() == 4  # all accepted: twice as long each time, up to k
    p.record(4, 4)
    assert p.next_length() == 4
    p.record(1, 1)  # a short draft (the proposer found only one) all accepted: no shorter
    assert p.next_length() == 4


def test_a_break_in_a_long_run_returns_to_k_by_doubling():
    p = DraftPacing(8)
    p.record(8, 2)
    lengths = []
    while p.length < 8:
        lengths.append(p.next_length())
        p.record(lengths[-1], lengths[-1])
    assert lengths == [3, 6]  # a + 1 after the break, then doubled and capped at k
    p.record(8, 8)
    assert p.next_length() == 8


def test_pauses_double_to_the_cap_and_an_acceptance_ends_them():
    p = DraftPacing(4)
    pauses = []
    for _ in range(7):
        p.record(p.length, 0)
        pauses.append(paused_steps(p))
        assert p.length == 1  # after a miss, one draft at a time
    assert pauses == [1, 2, 4, 8, 16, MAX_PAUSE, MAX_PAUSE] and MAX_PAUSE == 16
    p.record(1, 1)
    assert p.next_length() == 2  # an accepted draft: no pause, and longer again
    p.record(2, 0)
    assert paused_steps(p) == 1  # the next miss starts the doubling over


def test_pacing_is_a_bool():
    assert SpeculativeConfig("ngram").pacing is True
    with pytest.raises(TinyLLMError, match="pacing must be true or false, got 1"):
        SpeculativeConfig("ngram", pacing=1)
