"""The stop-string automaton: its state is linear in the stop strings, and it is shared between matchers."""

import tracemalloc

from tinyllm.text.stop import StopMatcher
from tinyllm.text.stop_automaton import StopAutomaton, compile_stops


def state_bytes(stops) -> int:
    tracemalloc.start()
    try:
        automaton = StopAutomaton(tuple(stops))
        size, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert automaton.num_nodes > 0
    return size


def test_nodes_are_at_most_the_total_length():
    stops = ("ab" * 500, "abba", "xyz", "ab")
    automaton = StopAutomaton(stops)
    assert automaton.num_nodes <= sum(len(s) for s in stops) + 1
    assert automaton.num_nodes == 1 + len({s[:k] for s in stops for k in range(1, len(s) + 1)})


def test_state_grows_linearly_with_the_stop_length():
    # The old matcher kept every prefix as a string: 4x the length cost 16x the memory.
    small, large = state_bytes(["ab" * 1000]), state_bytes(["ab" * 4000])
    assert large < 5 * small, (small, large)
    assert large < 200 * 8000  # a few hundred bytes per character at most, not a copy of every prefix


def test_matchers_with_the_same_stops_share_one_automaton():
    a, b = StopMatcher(["END", "###"]), StopMatcher(["END", "###"])
    assert a._automaton is b._automaton is compile_stops(("END", "###"))


def test_a_long_periodic_stop_string_is_found_and_held_exactly():
    stop = "ab" * 30000
    m = StopMatcher([stop])
    assert m.push("x" + "ab" * 29999) == ("x", False)  # everything after x could still become the stop
    assert m.push("a") == ("", False)
    assert m.push("bz") == ("", True)
