"""Tests for lockstep.checkers.engines: the engines behind one interface, and their settings.

One registry names every engine (the CLI keeps no copy); each engine's options are a dataclass,
made from keyword fields or given whole, and an option the engine does not take is an
``OptionError`` naming the field, which the CLI reports as its flag. ``check`` is lookup plus
validation. Kernel choice is an option (``kernels``), not an environment variable: no module
under lockstep/ reads a ``LOCKSTEP_*`` variable that switches an engine; the only one engines
read is the cache root, and it is documented.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path

import pytest

from lockstep.checkers import check
from lockstep.checkers.engines import (
    ENGINES,
    KERNELS,
    BmcOptions,
    Engine,
    ExplicitOptions,
    OptionError,
    Options,
    options_for,
)
from lockstep.checkers.vector.backend import NumpyBackend
from lockstep.checkers.vector.search import VectorSearch
from lockstep.cli import main
from lockstep.models import get_protocol

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "lockstep"
SMALL = get_protocol("pp-broadcast").instance("pre-fix", "seed")

# the LOCKSTEP_* variables code under lockstep/ may name, each with what it is for; none picks how an engine works
CACHE_ROOT = "LOCKSTEP_CACHE"  # lockstep.cache: the cache root (or off), documented
RUNTIME_PLUMBING = {
    "LOCKSTEP_RUN_ROOT": "where the runtime's run folders go",
    "LOCKSTEP_KEEP_RUN_DIR": "keep a run's folder for debugging",
    "LOCKSTEP_RUN_AUTHKEY": "a run's socket key, set by the launcher for its ranks",
    "LOCKSTEP_STORE": "set by the launcher: the ranks build their own rendezvous store",
    "LOCKSTEP_STORE_FD": "set by the launcher: rank 0's inherited store socket",
    "LOCKSTEP_PARENT_PID": "set for a child: the parent it dies with",
    "LOCKSTEP_INSTRUMENT": "the recorder hook a rank installs",
    "LOCKSTEP_TRACE_DIR": "where instrumented code records",
    "LOCKSTEP_TRACE_PARAMETERS": "the recording's model bounds",
    "LOCKSTEP_TRACE_VARIANT": "the recording's variant",
    "LOCKSTEP_VLLM_PROTOCOL": "the protocol a real vLLM process records",
    "LOCKSTEP_VLLM_STUB_CUDA_STREAMS": "set by the pp-broadcast driver: a real vLLM 0.21.0 process stubs CUDA streams",
}
REMOVED = ("LOCKSTEP_NATIVE", "LOCKSTEP_FUSED", "LOCKSTEP_KERNEL_CACHE", "LOCKSTEP_CACHE_DIR")
# engine code: what check() runs (the runtime's fuzzing orchestration reads the runtime's run root)
ENGINE_CODE = ("checkers", "spec", "cache.py", "cli/check.py")
NAME = re.compile(r"(?<![A-Za-z0-9_])LOCKSTEP_[A-Z0-9_]+")


def _names(files: list[Path]) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for file in files:
        for name in NAME.findall(file.read_text(encoding="utf-8")):
            found.setdefault(name, set()).add(str(file.relative_to(ROOT)))
    return found


def test_check_is_lookup_plus_validation() -> None:
    source = inspect.getsource(check)
    assert len(source.splitlines()) < 40, "check() grew: an engine's work belongs in its Engine.run"
    assert "if engine ==" not in source


def test_one_registry_names_every_engine_with_typed_options() -> None:
    assert list(ENGINES) == ["auto", "bfs", "dfs", "bfs-vec", "bfs-gpu", "bmc", "induction", "pdr", "certify", "swarm"]
    for name, engine in ENGINES.items():
        assert isinstance(engine, Engine) and engine.name == name
        assert dataclasses.is_dataclass(engine.options) and issubclass(engine.options, Options)
    commands = (PACKAGE / "cli" / "commands.py").read_text(encoding="utf-8")
    assert '"bfs-vec"' not in commands and "ENGINES" not in commands  # the CLI keeps no copy of the names


def test_options_made_from_fields_or_given_whole_check_alike() -> None:
    made = options_for("bfs", stop_at_first=True, compiled=True, symmetry=False)
    assert made == ExplicitOptions(stop_at_first=True)  # fields at their defaults are left out
    given, from_fields = check(SMALL, "bfs", made), check(SMALL, "bfs", stop_at_first=True)
    assert (given.stats.states, given.verdict) == (from_fields.stats.states, from_fields.verdict)
    with pytest.raises(TypeError, match="engine bmc takes BmcOptions, not ExplicitOptions"):
        check(SMALL, "bmc", made)
    with pytest.raises(TypeError, match="no engine takes an option 'colour'"):
        check(SMALL, "bfs", colour=True)
    assert options_for("bmc", depth=3, bmc_solver="z3") == BmcOptions(depth=3, solver="z3")  # older keyword names


@pytest.mark.parametrize(
    ("engine", "fields", "library", "flags"),
    [
        ("bfs-vec", {"device": "cpu"}, "device applies to engine bfs-gpu, not to bfs-vec", "--device applies to"),
        (
            "bfs",
            {"depth": 3},
            "depth applies to engine bmc, pdr and swarm, not to bfs",
            "--depth applies to --engine bmc",
        ),
        ("bmc", {}, "engine bmc needs depth K", "--engine bmc needs --depth K"),
        ("bmc", {"depth": 2, "solver": "cadical", "solver_timeout": 5.0}, "solver_timeout needs solver z3", None),
        ("pdr", {"k": 2}, "k applies to engine induction, not to pdr", "--k applies to --engine induction"),
        ("bfs-vec", {"kernels": "triton"}, "kernels triton applies to engine bfs-gpu, not to bfs-vec", "--kernels"),
        ("bfs-gpu", {"kernels": "c"}, "kernels c applies to engine auto and bfs-vec, not to bfs-gpu", None),
        ("auto", {"kernels": "fast"}, "kernels must be one of auto, arrays, c, triton, not 'fast'", None),
        ("dfs", {"compact": True}, "compact applies to engine auto, bfs-vec and bfs-gpu, not to dfs", None),
        ("bfs-vec", {"compiled": False}, "compiled applies to engine auto, bfs and dfs, not to bfs-vec", None),
        ("astar", {}, "unknown engine 'astar'; engines: auto, bfs, dfs, bfs-vec", "unknown --engine 'astar'"),
    ],
)
def test_an_option_error_names_the_field_and_the_cli_names_its_flag(
    engine: str, fields: dict[str, object], library: str, flags: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(OptionError) as raised:
        check(SMALL, engine, **fields)
    assert library in str(raised.value) and "--" not in str(raised.value)
    if flags is None:
        return
    spelled = {"k": "--k", "compiled": "--interpreted"}
    arguments = [spelled.get(key, f"--{key.replace('_', '-')}") for key in fields]
    values = [str(value) for value in fields.values()]
    words = [word for pair in zip(arguments, values, strict=True) for word in pair]
    assert main(["check", "pp-broadcast", "--variant", "pre-fix", "--engine", engine, *words]) == 2
    assert flags in " ".join(capsys.readouterr().err.split())


def test_the_kernels_option_picks_the_search_s_kernels() -> None:
    machine = SMALL.machine()
    assert KERNELS == ("auto", "arrays", "c", "triton")
    assert VectorSearch(machine, NumpyBackend(), engine="bfs-vec", kernels="arrays").native is None
    arrays = check(SMALL, "bfs-vec", kernels="arrays")
    assert (arrays.stats.states, arrays.verdict) == (check(SMALL, "bfs").stats.states, check(SMALL, "bfs").verdict)


def test_no_environment_variable_switches_an_engine_and_the_cache_root_is_documented() -> None:
    everywhere = _names(sorted(PACKAGE.rglob("*.py")))
    unknown = set(everywhere) - {CACHE_ROOT, *RUNTIME_PLUMBING}
    assert not unknown, f"LOCKSTEP_* names nobody allowed: { {name: everywhere[name] for name in unknown} }"
    engine_files = [
        file
        for part in ENGINE_CODE
        for file in ((PACKAGE / part).rglob("*.py") if (PACKAGE / part).is_dir() else [PACKAGE / part])
        if file.name != "runtime.py" or file.parent.name != "fuzz"
    ]
    assert set(_names(engine_files)) == {CACHE_ROOT}  # the engines read the cache root, nothing else
    proofs = {"test_engines.py", "test_cache.py"}  # these name the removed settings to show they are gone
    tests = [file for file in (ROOT / "tests").rglob("*.py") if file.name not in proofs]
    documents = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]
    files = [*PACKAGE.rglob("*.py"), *tests, *(ROOT / "bench").rglob("*.py"), *documents]
    stale = {name: where for name, where in _names(files).items() if name in REMOVED}
    assert not stale, f"removed settings still named: {stale}"
    documented = " ".join(document.read_text(encoding="utf-8") for document in documents)
    assert f"{CACHE_ROOT}=off" in documented and f"${CACHE_ROOT}" in documented
