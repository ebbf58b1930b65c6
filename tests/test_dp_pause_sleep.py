"""dp-pause sleep combined with pause (``sleep_with_pause``): sleep while paused and pause while asleep
keep the device idle between the calls, wake every executor and never hang (v0.33.0, the smallest)."""

from __future__ import annotations

import pytest

from lockstep.checkers import check
from lockstep.models.dp_pause.model import PROTOCOL
from lockstep.spec.protocol import UsageError

SLEEP_PROPERTIES = ["device_idle_after_pause", "awake_after_wake_up", "no_hang", "slept"]


@pytest.mark.parametrize("name", ["sleep-while-paused", "pause-while-asleep"])
def test_sleep_combined_with_pause_keeps_device_idle_and_wakes(name: str) -> None:
    result = check(PROTOCOL.instance("v0.33.0", name), engine="bfs-vec", properties=SLEEP_PROPERTIES)
    verdicts = {item.name: item.verdict.value for item in result.properties}
    assert verdicts == {name: "holds" for name in SLEEP_PROPERTIES}


def test_sleep_with_pause_without_a_sleep_is_refused() -> None:
    instance = PROTOCOL.instance("v0.33.0", "seed", {"sleep_with_pause": 1})
    with pytest.raises(UsageError, match="sleep_with_pause needs sleep_level = 1"):
        instance.machine()
