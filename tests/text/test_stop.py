"""StopMatcher against brute force: cut before the earliest stop string, hold back just what could become one."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tinyllm.text.stop import StopMatcher, StopResult


def run(stops, pushes) -> list[tuple[str, bool]]:
    matcher = StopMatcher(stops)
    return [tuple(matcher.push(text)) for text in pushes]


# ---- brute-force oracles --------------------------------------------------------------------------


def earliest_stop(text: str, stops) -> int | None:
    starts = [i for i in range(len(text)) for s in stops if text.startswith(s, i)]
    return min(starts, default=None)


def held_length(text: str, stops) -> int:
    """The longest suffix of text that is a proper prefix of some stop string."""
    return max((k for k in range(1, len(text) + 1) for s in stops if len(s) > k and s.startswith(text[-k:])), default=0)


# ---- examples -------------------------------------------------------------------------------------


def test_stop_across_pushes_is_cut():
    assert run(["\n\nUser:"], ["Hello\n", "\nUs", "er: hi"]) == [("Hello", False), ("", False), ("", True)]


def test_stop_inside_one_push_is_cut():
    assert run(["###"], ["abc###def"]) == [("abc", True)]


def test_earliest_start_wins_whatever_the_order_of_stops():
    assert run(["c", "ab"], ["xabcd"]) == [("x", True)]
    assert run(["ab", "c"], ["xabcd"]) == [("x", True)]
    assert run(["c", "bcd"], ["ab", "cd"]) == [("a", False), ("", True)]  # "bcd" starts first, ends last


def test_stop_at_the_very_start_leaves_no_text():
    assert run(["<end>"], ["<end>more"]) == [("", True)]
    assert run(["<end>"], ["<e", "nd>"]) == [("", False), ("", True)]


def test_overlapping_candidates():
    assert run(["ab"], ["a", "a", "b"]) == [("", False), ("a", False), ("", True)]
    assert run(["ab"], ["aab"]) == [("a", True)]
    assert run(["abab"], ["aba", "bab"]) == [("", False), ("", True)]


def test_stop_that_is_a_prefix_of_another():
    assert run(["ab", "abcd"], ["xa", "bcd"]) == [("x", False), ("", True)]
    assert run(["abcd", "ab"], ["xa", "bcd"]) == [("x", False), ("", True)]


def test_holds_back_exactly_the_possible_start_of_a_stop():
    matcher = StopMatcher(["here!"])
    assert matcher.push("I am here") == StopResult("I am ", False)  # all of "here", not a character less
    assert matcher.push(" now, he") == StopResult("here now, ", False)  # released as soon as it cannot be
    assert matcher.flush() == "he"
    assert matcher.flush() == ""


def test_without_stops_text_passes_unchanged():
    matcher = StopMatcher([])
    assert [matcher.push(t) for t in ["a", "", "b\n"]] == [("a", False), ("", False), ("b\n", False)]
    assert matcher.flush() == ""


def test_after_a_stop_nothing_more_is_emitted():
    matcher = StopMatcher(["x"])
    assert matcher.push("axb") == ("a", True)
    assert matcher.stopped
    assert matcher.push("more") == ("", True)
    assert matcher.flush() == ""


def test_rejects_bad_stops_and_text():
    for bad in ([""], ["ok", ""], "abc", [None], [b"ab"]):
        with pytest.raises(ValueError):
            StopMatcher(bad)
    with pytest.raises(ValueError, match="text"):
        StopMatcher(["x"]).push(None)


# ---- the streaming guarantee, by property --------------------------------------------------------

# A small alphabet so that stop strings, their overlaps and their prefixes occur often.
STOPS = st.lists(st.text("ab!", min_size=1, max_size=4), max_size=3)
TEXTS = st.text("ab!c", max_size=30)


def expected_text(pushes, stops) -> str:
    """Generation ends on the first push after which a stop string has occurred (later text is never
    generated); the text is then everything before the earliest-starting occurrence."""
    pushed = ""
    for piece in pushes:
        pushed += piece
        stop_at = earliest_stop(pushed, stops)
        if stop_at is not None:
            return pushed[:stop_at]
    return pushed


@settings(max_examples=500, deadline=None)
@given(stops=STOPS, text=TEXTS, data=st.data())
def test_stop_strings_cut_and_stream_safely(stops, text, data):
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=8)))
    pushes = [text[i:j] for i, j in zip([0, *cuts], [*cuts, len(text)])]
    final = expected_text(pushes, stops)

    matcher, shown, pushed = StopMatcher(stops), "", ""
    for piece in pushes:
        pushed += piece
        result = matcher.push(piece)
        shown += result.text
        assert final.startswith(shown)  # never text that is later cut
        assert result.stopped == (earliest_stop(pushed, stops) is not None)
        if result.stopped:
            break
        assert len(pushed) - len(shown) == held_length(pushed, stops)  # held back: exactly that, no more
    else:
        shown += matcher.flush()
    assert shown == final


def test_a_stop_completed_first_wins_over_a_longer_one_that_would_start_earlier():
    """Generation stops when "!" completes; "a!a", which would start earlier, never occurs."""
    assert run(["!", "a!a"], ["aa!", "a"]) == [("aa", True), ("", True)]
    assert run(["!", "a!a"], ["aa!a"]) == [("a", True)]
