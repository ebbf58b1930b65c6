"""The protocol vocabulary derived from the model, and recording through it.

Both recorders (the runtime's ``Recorder`` and ``lockstep.record.TraceRecorder``) fail at the first
use of an action, argument, value, communicator or observed name the model does not have, and
write nothing for that event.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lockstep import record
from lockstep.impl.runtime import Recorder, RunConfig
from lockstep.models import get_protocol
from lockstep.spec.protocol import UsageError
from lockstep.spec.vocabulary import Vocabulary, VocabularyError
from lockstep.traces import TraceSource
from lockstep.traces.format import TraceFormatError
from lockstep.traces.recorder import Projection

DP_PAUSE = get_protocol("dp-pause")


def test_the_vocabulary_is_the_models() -> None:
    vocabulary = Vocabulary.of(DP_PAUSE, "post-fix", {"ranks": 3, "scenario": "ignored"})
    machine = DP_PAUSE.instance("post-fix", overrides={"ranks": 3}).machine()
    assert set(vocabulary.actions) == {action.name for action in machine.actions}
    assert list(vocabulary.actions["step"].parameters) == ["rank"]
    assert vocabulary.variables["mode"] == machine.variables["mode"].sort
    assert vocabulary.variants == tuple(variant.name for variant in DP_PAUSE.variants)
    assert vocabulary.communicators["engine_dp"] == ("sync_sum", "resume_max")
    assert vocabulary.entry("mode", 2) == "mode[2]" == vocabulary.entry("mode", "2")
    assert vocabulary.entry("requests") == "requests"
    assert vocabulary.entries("mode") == {"mode[0]": 0, "mode[1]": 1, "mode[2]": 2}
    with pytest.raises(VocabularyError, match="is not a map"):
        vocabulary.entries("client.phase")
    # pre-fix has no two-phase pause state
    assert "pending_pause" not in Vocabulary.of(DP_PAUSE, "pre-fix").variables


@pytest.mark.parametrize(
    ("name", "key", "message"),
    [
        ("mood", 0, "has no variable 'mood'"),
        ("mode", 2, "beyond its bounds"),
        ("client.phase", 0, "is not a map"),
    ],
)
def test_entry_names_only_what_the_model_has(name: str, key: object, message: str) -> None:
    with pytest.raises(VocabularyError, match=message):
        Vocabulary.of(DP_PAUSE, "post-fix").entry(name, key)


def test_unknown_variant_and_parameter_bounds_are_named() -> None:
    with pytest.raises(UsageError, match="no variant 'mid-fix'"):
        Vocabulary.of(DP_PAUSE, "mid-fix")
    with pytest.raises(VocabularyError, match="ranks of dp-pause must be at least 2"):
        Vocabulary.of(DP_PAUSE, "post-fix", {"ranks": 1})


BAD_EVENTS = [
    ({"action": "stepp", "args": {"rank": 0}}, "has no action 'stepp'"),
    ({"action": "step", "args": {"rnk": 0}}, "has no parameter 'rnk'; its parameters: rank"),
    ({"action": "step", "args": {"rank": 2}}, "args.rank = 2 is beyond its bounds"),
    ({"action": "step", "args": {"rank": True}}, "args.rank must be an integer"),
    ({"action": "step", "args": {"rank": 0}, "observed": {"mood[0]": "TOP"}}, "has no variable 'mood'"),
    ({"action": "step", "args": {"rank": 0}, "observed": {"mode[0]": "NAPPING"}}, "'NAPPING' is not one of TOP"),
    ({"action": "step", "args": {"rank": 0}, "observed": {"mode[5]": "TOP"}}, "'5' is not a key"),
    ({"action": "enter", "args": {"communicator": "dp_group", "op": "all_reduce"}}, "no communicator 'dp_group'"),
]


@pytest.mark.parametrize(("event", "message"), BAD_EVENTS)
def test_lockstep_record_fails_at_the_first_unknown_name_or_value(
    tmp_path: Path, event: dict[str, object], message: str
) -> None:
    with record.open_trace(tmp_path, "rank:0", "dp-pause", "post-fix", record.parameters("dp-pause")) as recorder:
        recorder.event("step", {"rank": 0}, {recorder.vocabulary.entry("mode", 0): "TOP"})
        with pytest.raises(TraceFormatError, match=message):
            recorder.event(event["action"], event["args"], event.get("observed"))  # type: ignore[arg-type]
        recorder.event("notify_idle", {"rank": 0})
    lines = (tmp_path / "rank-0.jsonl").read_text().splitlines()
    assert len(lines) == 3  # the header and the two good events: nothing of the bad one


@pytest.mark.parametrize(("event", "message"), BAD_EVENTS)
@pytest.mark.parametrize("trace_dir", [True, False], ids=["file", "counting"])
def test_the_runtime_recorder_fails_at_the_first_unknown_name_or_value(
    tmp_path: Path, event: dict[str, object], message: str, trace_dir: bool
) -> None:
    config = RunConfig(protocol="dp-pause", variant="post-fix", trace_dir=str(tmp_path) if trace_dir else None)
    recorder = Recorder(config, "rank:0", {"ranks": 2}, TraceSource("runtime"))
    recorder.record("step", {"rank": 0})
    with pytest.raises(TraceFormatError, match=message):
        recorder.record(event["action"], event["args"], event.get("observed"))  # type: ignore[arg-type]
    assert recorder.events == 1
    recorder.close()


def test_a_projection_checks_its_values_the_first_time_it_sees_them() -> None:
    vocabulary = Vocabulary.of(DP_PAUSE, "post-fix")
    projection = Projection(vocabulary, [vocabulary.entry("mode", 1), vocabulary.entry("engines_running", 1)])
    assert projection.encode("TOP", False) == '{"mode[1]":"TOP","engines_running[1]":false}'
    assert projection.encode("SYNC", True) == '{"mode[1]":"SYNC","engines_running[1]":true}'
    with pytest.raises(TraceFormatError, match="'NAPPING' is not one of"):
        projection.encode("NAPPING", True)
    with pytest.raises(TraceFormatError, match="must be true or false"):
        projection.encode("TOP", 1)  # 1 == True, but not a Bool
