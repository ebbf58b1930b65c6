"""Reading, validating and merging traces: the streaming reader, the causal merge, and bad input.

Every bad input must end in exit 2 with one message naming the file and line (through the CLI
functions in-process); a killed run's cut-short final line is only a warning.
"""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from lockstep.cli.root import parse
from lockstep.cli.trace import command_replay, command_trace
from lockstep.traces.merge import open_traces
from lockstep.traces.reader import TraceInputError, TraceReader

FIXTURES = Path(__file__).parent / "fixtures" / "traces"
BAD = FIXTURES / "bad"
PRE_FIX = FIXTURES / "dp-pause-pre-fix-seed.jsonl"


def run(*argv: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Run ``lockstep replay`` / ``lockstep trace`` in-process: (exit code, stdout, stderr)."""
    arguments = parse(argv).arguments  # the command line as `lockstep` parses it
    stream = io.StringIO()
    console = Console(file=stream, width=400, no_color=True)
    code = command_replay(arguments, console) if arguments.command == "replay" else command_trace(arguments, console)
    return code, capsys.readouterr().out, stream.getvalue()


def test_reader_streams_the_events_in_order() -> None:
    with TraceReader(PRE_FIX) as reader:
        assert reader.header["protocol"] == "dp-pause"
        records = list(reader.events())
    assert [record.event["index"] for record in records] == list(range(17))
    assert [record.line for record in records] == list(range(2, 19))
    assert records[9].event["action"] == "step"


@pytest.mark.parametrize(
    ("name", "line", "problem"),
    [
        ("malformed-json.jsonl", 3, "malformed JSON"),
        ("missing-header.jsonl", 1, "missing header"),
        ("wrong-header.jsonl", 1, "field 'format' must be 'lockstep-trace'"),
        ("unsupported-version.jsonl", 1, "unsupported trace version 2"),
        ("unknown-protocol.jsonl", 1, "unknown protocol 'no-such-protocol'"),
        ("unknown-action.jsonl", 2, "unknown action 'client_teleport'"),
        ("unknown-actor.jsonl", 2, "unknown actor 'scheduler'"),
        ("missing-field.jsonl", 2, "missing field 'args'"),
        ("beyond-bounds.jsonl", 2, "args.rank = 5 is beyond its bounds"),
        ("out-of-order.jsonl", 3, "event out of order: index 2, expected 1"),
        ("duplicate.jsonl", 3, "duplicate event: index 0"),
        ("empty.jsonl", 1, "empty file"),
        ("binary.jsonl", 1, "binary"),
        ("causal-order.jsonl", 4, "out of causal order"),
    ],
)
def test_bad_input_exits_2_naming_file_and_line(
    name: str, line: int, problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    trust = ("--trust-header",) if name == "causal-order.jsonl" else ()  # its header exempts every actor
    code, out, err = run("replay", str(BAD / name), *trust, capsys=capsys)
    assert code == 2
    assert out == ""
    assert f"{BAD / name}:{line}: " in err, err
    assert problem in err, err
    assert "Traceback" not in err


def test_not_utf8_is_named_as_binary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "latin1.jsonl"
    trace.write_bytes(PRE_FIX.read_bytes().split(b"\n")[0] + b"\n\xff\xfe garbage\n")
    code, _, err = run("replay", str(trace), capsys=capsys)
    assert code == 2 and f"{trace}:2: not UTF-8 text" in err


def test_values_beyond_the_headers_bounds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = PRE_FIX.read_text().split("\n")
    observed = tmp_path / "observed.jsonl"
    observed.write_text(
        "\n".join([lines[0], lines[1], lines[2], lines[3].replace('"requests":[1,0]', '"requests":[7,0]')]) + "\n"
    )
    code, _, err = run("replay", str(observed), capsys=capsys)
    assert code == 2 and f"{observed}:4: observed.requests[0] = 7 is beyond its bounds (0..1)" in err
    parameter = tmp_path / "parameter.jsonl"
    parameter.write_text("\n".join([lines[0].replace('"ranks":2', '"ranks":99'), *lines[1:]]))
    code, _, err = run("replay", str(parameter), capsys=capsys)
    assert code == 2 and f"{parameter}:1: header: parameter ranks of dp-pause must be at most 8" in err.replace(
        "at least 2 and ", ""
    )


def test_a_cut_short_final_line_is_a_warning_and_the_prefix_decides(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    killed = tmp_path / "killed.jsonl"
    killed.write_text(PRE_FIX.read_text() + '{"index":17,"actor":"rank:0","act')
    code, out, err = run("replay", str(killed), "--json", capsys=capsys)
    assert code == 1  # the 17 complete events still violate the property
    assert f"warning: {killed}:19: the final line is cut short" in err
    payload = json.loads(out)
    assert payload["verdict"] == "violated" and payload["warnings"]
    early = tmp_path / "early.jsonl"
    early.write_text("\n".join(PRE_FIX.read_text().split("\n")[:6]) + "\n" + '{"index":5,"act')
    code, _, err = run("replay", str(early), capsys=capsys)
    assert code == 3 and "cut short" in err and "inconclusive" in err  # the prefix has no events of rank 1


def test_a_complete_line_without_a_newline_is_read(tmp_path: Path) -> None:
    trace = tmp_path / "no-newline.jsonl"
    trace.write_text(PRE_FIX.read_text().rstrip("\n"))
    with TraceReader(trace) as reader:
        assert sum(1 for _ in reader.events()) == 17
        assert reader.warnings == []


def test_merge_orders_per_actor_files_causally(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    merged = tmp_path / "merged.jsonl"
    code, _, err = run("trace", "merge", str(FIXTURES / "per-actor"), "-o", str(merged), capsys=capsys)
    assert code == 0, err
    with TraceReader(merged) as reader:
        events = [record.event for record in reader.events()]
    assert [event["index"] for event in events] == list(range(10))
    position = {(e["actor"], e["action"], json.dumps(e["clock"], sort_keys=True)): i for i, e in enumerate(events)}

    def at(actor: str, action: str, clock: dict[str, int]) -> int:
        return position[(actor, action, json.dumps(clock, sort_keys=True))]

    for number in (1, 2):  # every complete of op k after every enter of op k
        for completing in ("rank:0", "rank:1"):
            for entering in ("rank:0", "rank:1"):
                assert at(completing, "complete", {"worker_dp": number}) > at(entering, "enter", {"worker_dp": number})
    assert at("rank:1", "wake", {"recv:rank0-to-rank1": 1}) > at("rank:0", "notify", {"send:rank0-to-rank1": 1})
    assert list(open_traces([merged]).records())  # the merged file passes the single-stream check


def test_a_merged_file_with_its_sources_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "run"
    shutil.copytree(FIXTURES / "per-actor", folder)
    code, _, _ = run("trace", "merge", str(folder), "-o", str(folder / "merged.jsonl"), capsys=capsys)
    assert code == 0
    code, _, err = run("trace", "merge", str(folder), "-o", str(tmp_path / "again.jsonl"), capsys=capsys)
    assert code == 2 and "also has events in" in err and f"{folder / 'rank-0.jsonl'}:2" in err


def test_merge_reports_a_complete_no_order_can_explain(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "run"
    shutil.copytree(FIXTURES / "per-actor", folder)
    rank1 = folder / "rank-1.jsonl"
    lines = rank1.read_text().split("\n")
    lines[1], lines[2] = lines[2], lines[1]  # complete before its own enter
    lines[1] = lines[1].replace('"index":1', '"index":0')
    lines[2] = lines[2].replace('"index":0', '"index":1')
    rank1.write_text("\n".join(lines))
    code, _, err = run("trace", "merge", str(folder), "-o", str(tmp_path / "out.jsonl"), capsys=capsys)
    assert (
        code == 2
        and f"{rank1}:2: event out of causal order: complete of worker_dp#1 by rank:1 before its own enter" in err
    )
    assert not (tmp_path / "out.jsonl").exists()


def test_merge_blocked_on_a_missing_send(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "run"
    shutil.copytree(FIXTURES / "per-actor", folder)
    rank0 = folder / "rank-0.jsonl"
    rank0.write_text(rank0.read_text().replace('"send:rank0-to-rank1":1', '"send:other":1'))
    code, _, err = run("trace", "merge", str(folder), "-o", str(tmp_path / "out.jsonl"), capsys=capsys)
    assert code == 2 and "no file can go on" in err and "receive of message 1 on rank0-to-rank1 before its send" in err


def test_headers_of_one_run_must_agree(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "run"
    shutil.copytree(FIXTURES / "per-actor", folder)
    rank1 = folder / "rank-1.jsonl"
    rank1.write_text(rank1.read_text().replace('"variant":"post-fix"', '"variant":"pre-fix"', 1))
    code, _, err = run("trace", "merge", str(folder), "-o", str(tmp_path / "out.jsonl"), capsys=capsys)
    assert code == 2 and f"{rank1}:1: not the same run" in err and "variant" in err


def test_missing_file_and_empty_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run("replay", str(tmp_path / "nope.jsonl"), capsys=capsys)
    assert code == 2 and "nope.jsonl" in err
    code, _, err = run("replay", str(tmp_path), capsys=capsys)
    assert code == 2 and "holds no *.jsonl" in err


def test_reader_memory_is_flat(tmp_path: Path) -> None:
    """The reader holds one line at a time: reading 20x more events costs no more peak memory."""
    import tracemalloc

    lines = PRE_FIX.read_text().split("\n")
    header, body = lines[0], [line for line in lines[1:] if line]

    def peak(repeats: int) -> int:
        trace = tmp_path / f"long-{repeats}.jsonl"
        with open(trace, "w") as out:
            out.write(header + "\n")
            index = 0
            for _ in range(repeats):
                for line in body:
                    event = json.loads(line)
                    event["index"] = index
                    index += 1
                    out.write(json.dumps(event) + "\n")
        tracemalloc.start()
        with TraceReader(trace) as reader:
            count = sum(1 for _ in reader.events())
        _, top = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert count == repeats * len(body)
        return top

    small, large = peak(50), peak(1000)
    assert large < small * 1.5 + 64 * 1024, (small, large)


def test_trace_input_error_message_shape() -> None:
    error = TraceInputError("a.jsonl", 7, "broken")
    assert str(error) == "a.jsonl:7: broken" and error.line == 7


@pytest.mark.parametrize("timestamps", [True, False])
def test_merge_orders_what_causality_leaves_open_as_it_happened(tmp_path: Path, timestamps: bool) -> None:
    # rank 1 takes a START_DP_WAVE before rank 0 does; nothing recorded orders the two (the coordinator that
    # sent both is not recorded): with times the merge follows them, without it takes the first file's event
    from lockstep import record

    parameters = record.parameters("dp-pause", ranks=2)
    recorders = {
        rank: record.open_trace(tmp_path, f"rank:{rank}", "dp-pause", "post-fix", parameters, timestamps=timestamps)
        for rank in (0, 1)
    }
    recorders[1].event("arrive_from_coordinator", {"rank": 1})
    recorders[0].event("arrive_from_coordinator", {"rank": 0})
    recorders[0].event("handle_start_wave", {"rank": 0})  # carries its time
    with recorders[1].collective("worker_dp", "forward"):  # enter and complete carry theirs too
        pass
    for recorder in recorders.values():
        recorder.close()
    merged = [(record.event["actor"], record.event["action"]) for record in open_traces([tmp_path]).records()]
    if timestamps:
        assert merged == [
            ("rank:1", "arrive_from_coordinator"),
            ("rank:0", "arrive_from_coordinator"),
            ("rank:0", "handle_start_wave"),
            ("rank:1", "enter"),
            ("rank:1", "complete"),
        ]
    else:
        assert merged[0] == ("rank:0", "arrive_from_coordinator")  # the first file (rank-0.jsonl) goes first
