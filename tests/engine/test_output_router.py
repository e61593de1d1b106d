"""The one output router of LLM and AsyncEngine: what a front gets for each engine output."""

import pytest

from tinyllm.engine.output_router import EngineFault, Failed, Inbox, OutputRouter
from tinyllm.outputs import RequestOutput


def output(rid: str, text: str = "", finish: str | None = None, error: str | None = None, kind: str | None = None):
    return RequestOutput(rid, text, [], [], finish is not None, finish, error=error, error_kind=kind)


def test_outputs_reach_their_own_request_and_a_finish_closes_the_route():
    router, a, b = OutputRouter(), Inbox(), Inbox()
    router.open("a", a)
    router.open("b", b)
    finished = router.route([output("a", "x"), output("b", "y", "stop"), output("a", "z")])
    assert [o.text for o in a] == ["x", "z"] and [o.text for o in b] == ["y"]
    assert finished == ["b"] and list(router.routes) == ["a"]
    router.route([output("b", "late")])  # no route any more: dropped
    assert len(b) == 1


def test_a_requests_own_grammar_failure_is_an_output_and_any_other_error_is_an_engine_fault():
    router, own, other = OutputRouter(), Inbox(), Inbox()
    router.open("own", own)
    router.open("other", other)
    failed = []
    router.route(
        [output("own", finish="error", error="gave up", kind="grammar"), output("other", finish="error", error="boom")],
        on_failed=lambda route, error: failed.append((route.mailbox, error)),
    )
    assert isinstance(own[0], RequestOutput) and own[0].error == "gave up"
    (item,) = other
    assert isinstance(item, Failed) and isinstance(item.error, EngineFault) and str(item.error) == "boom"
    assert failed == [(other, item.error)] and not router.routes


def test_fail_all_fails_every_open_request_once():
    router, a, b = OutputRouter(), Inbox(), Inbox()
    router.open("a", a, record="metrics of a")
    router.open("b", b)
    records = []
    error = EngineFault("down")
    assert router.fail_all(error, lambda route, e: records.append(route.record)) == ["a", "b"]
    assert [x.error for x in (*a, *b)] == [error, error] and records == ["metrics of a", None]
    assert [x.request_id for x in (*a, *b)] == ["a", "b"]
    seen = []
    router.open("c", Inbox())
    router.fail_all(error, lambda route, e: seen.append(e))
    assert seen == [error]


def test_close_returns_the_route_and_stops_its_outputs():
    router, a = OutputRouter(), Inbox()
    router.open("a", a, record="metrics of a")
    route = router.close("a")
    assert route.mailbox is a and route.record == "metrics of a" and not router.routes
    router.route([output("a", "x")])
    assert not a
    assert not router.routes and router.close("a") is None


@pytest.mark.parametrize("faulty", ["a", "b", "c", "d"])  # first, middle and last opened
def test_an_engine_fault_reaches_exactly_the_faulty_requests_mailbox_wherever_it_was_opened(faulty):
    names = ["a", "b", "c", "d"]
    router = OutputRouter()
    boxes = {name: Inbox() for name in names}
    for name in names:
        router.open(name, boxes[name], record=f"record of {name}")
    failed = []
    outputs = [output(n, "x") if n != faulty else output(n, finish="error", error="boom") for n in names]
    finished = router.route(outputs, on_failed=lambda route, error: failed.append(route.record))
    (item,) = boxes[faulty]
    assert isinstance(item, Failed) and item.request_id == faulty and str(item.error) == "boom"
    for name in names:
        if name != faulty:
            assert [(type(o), o.text) for o in boxes[name]] == [(RequestOutput, "x")]
    assert failed == [f"record of {faulty}"] and finished == [faulty]
    assert sorted(router.routes) == sorted(set(names) - {faulty})
    router.route([output(n, "y") for n in names])  # the others go on; the failed one gets nothing more
    assert len(boxes[faulty]) == 1 and all(len(boxes[n]) == 2 for n in names if n != faulty)


def test_hooks_get_the_route_and_an_error_without_text_still_says_what_happened():
    router, a, b = OutputRouter(), Inbox(), Inbox()
    router.open("a", a, record="metrics of a")
    router.open("b", b, record="metrics of b")
    seen = []
    router.route(
        [output("a", "x"), output("b", finish="error")],
        on_output=lambda route, out: seen.append((route.record, out.text)),
        on_failed=lambda route, error: seen.append((route.record, str(error))),
    )
    assert seen == [("metrics of a", "x"), ("metrics of b", "the request failed")]
    assert str(b[0].error) == "the request failed"
