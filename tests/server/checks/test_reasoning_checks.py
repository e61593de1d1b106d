"""The thinking switches' checks (server/checks/reasoning.py) on hostile values: a 400 naming the field, with the
value clipped in its message."""

import pytest

from tinyllm.server.checks.reasoning import thinking_of
from tinyllm.server.wire.client_text import MAX_LOGGED_CHARS
from tinyllm.server.wire.errors import APIError

HUGE = "x" * 100_000


@pytest.mark.parametrize(
    "extra, field",
    [
        ({"reasoning_effort": HUGE}, "reasoning_effort"),
        ({"chat_template_kwargs": {"enable_thinking": HUGE}}, "chat_template_kwargs"),
        ({"chat_template_kwargs": {HUGE: True}}, "chat_template_kwargs"),
        ({"chat_template_kwargs": [HUGE]}, "chat_template_kwargs"),
    ],
)
def test_a_huge_value_is_a_400_with_the_value_clipped(extra, field):
    with pytest.raises(APIError) as info:
        thinking_of(extra, None, constrained=False)
    assert info.value.status == 400 and info.value.param == field
    assert len(info.value.message) < MAX_LOGGED_CHARS + 200 and "more)" in info.value.message
