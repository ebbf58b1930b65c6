"""The pytest plugin shipped with lockstep, used the way another project's suite would (pytester)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

# loaded once here: pytester's in-process runs drop the modules they import, and numpy cannot load twice
import numpy  # noqa: F401
import pytest

pytest_plugins = ["pytester"]

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "traces"


def test_the_plugin_loads_without_heavy_imports() -> None:
    """Loading the plugin (as pytest does at start-up) imports no torch, z3 or hypothesis."""
    code = (
        "import sys, lockstep.pytest_plugin\n"
        "heavy = sorted(name for name in ('torch', 'z3', 'hypothesis', 'rich', 'networkx') if name in sys.modules)\n"
        "print(','.join(heavy))\n"
    )
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert completed.stdout.strip() == ""


def test_it_adds_only_lockstep_options(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--help")
    options = [line.split()[0] for line in result.outlines if line.strip().startswith("--lockstep")]
    assert options == ["--lockstep-max-candidates=K", "--lockstep-fuzz-examples=N", "--lockstep-fuzz-seed=S"]


def test_assert_conforms_in_a_users_suite(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        f"""
        import pytest

        WITNESS = {str(FIXTURES / "dp-pause-post-fix-resumed.jsonl")!r}
        COUNTEREXAMPLE = {str(FIXTURES / "dp-pause-pre-fix-seed.jsonl")!r}
        RUNTIME = {str(FIXTURES / "runtime" / "dp-pause-post-fix")!r}

        def test_post_fix_witness_conforms(lockstep_assert_conforms):
            result = lockstep_assert_conforms(WITNESS, protocol="dp-pause")
            assert result["verdict"] == "conforms"

        def test_per_rank_recording_conforms(lockstep_assert_conforms):
            lockstep_assert_conforms(RUNTIME, profile="runtime")

        def test_pre_fix_counterexample_fails(lockstep_assert_conforms):
            lockstep_assert_conforms(COUNTEREXAMPLE)

        def test_pre_fix_counterexample_against_post_fix(lockstep_assert_conforms):
            lockstep_assert_conforms(COUNTEREXAMPLE, variant="post-fix")
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=2)
    text = "\n".join(result.outlines)
    assert "violated at event 16" in text and "property violated: quiescent_during_rpc" in text
    assert "diverges at event 7" in text and "longest conforming prefix: 7 events" in text


def test_the_candidate_limit_option_reaches_the_replay(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        f"""
        def test_runtime(lockstep_assert_conforms):
            lockstep_assert_conforms({str(FIXTURES / "collectives-only-pre-fix")!r}, trust_header=True)
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "--lockstep-max-candidates", "5")
    result.assert_outcomes(failed=1)
    assert any("inconclusive" in line for line in result.outlines)


def test_fuzzing_as_a_test_in_a_users_suite(pytester: pytest.Pytester) -> None:
    """A user's suite fuzzes a built-in model and one of its own: pre-fix fails with the steps, post-fix passes."""
    pytester.makepyfile(
        """
        from lockstep.spec.machine import Machine, Step
        from lockstep.spec.sorts import IndexSort, MapSort, integers

        def test_post_fix_is_clean(lockstep_fuzz):
            lockstep_fuzz("computed-tokens", variant="post-fix")

        def test_pre_fix_fails(lockstep_fuzz):
            lockstep_fuzz("computed-tokens", variant="pre-fix")

        def my_model():
            Rank = IndexSort("Rank", 2)
            machine = Machine("counter")
            count = machine.variable("count", MapSort(Rank, integers(0, 3)), (0, 0))

            @machine.action(actor="rank:{rank}", rank=Rank)
            def bump(rank):
                return Step(count[rank] < 3, {count: count.set(rank, count[rank] + 1)})

            machine.always("below_three", count[0] + count[1] < 5)
            return machine

        def test_my_own_model_fails(lockstep_fuzz):
            lockstep_fuzz(my_model())
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "--lockstep-fuzz-examples=100")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(
        ["*U3_bounded_slack is violated after * steps*", "*below_three is violated after 5 steps*"]
    )


def test_the_options_are_read_from_the_configuration_file_and_the_command_line_wins(pytester: pytest.Pytester) -> None:
    """``lockstep_max_candidates`` in pyproject.toml (or pytest.ini) reaches the replay; the
    command line's ``--lockstep-max-candidates`` wins over it; a value that is no integer stops
    the run with a message naming the setting."""
    pytester.makepyfile(
        f"""
        def test_runtime(lockstep_assert_conforms):
            lockstep_assert_conforms({str(FIXTURES / "collectives-only-pre-fix")!r}, trust_header=True)
        """
    )
    pytester.makefile(".toml", pyproject="[tool.pytest.ini_options]\nlockstep_max_candidates = 5\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    assert any("inconclusive" in line for line in result.outlines)
    pytester.runpytest("-p", "no:cacheprovider", "--lockstep-max-candidates", "100000").assert_outcomes(passed=1)
    (pytester.path / "pyproject.toml").unlink()
    pytester.makeini("[pytest]\nlockstep_max_candidates = 5\n")
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(failed=1)
    pytester.makeini("[pytest]\nlockstep_fuzz_examples = many\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "lockstep_fuzz_examples must be an integer, not 'many'" in "\n".join(result.errlines)


def test_a_failing_assertion_shows_the_users_test_not_locksteps_frames(pytester: pytest.Pytester) -> None:
    """The helpers set ``__tracebackhide__``: a failure points at the user's line, with lockstep's
    message, and no frame of lockstep's own source."""
    pytester.makepyfile(
        f"""
        def test_counterexample_conforms(lockstep_assert_conforms):
            lockstep_assert_conforms({str(FIXTURES / "dp-pause-pre-fix-seed.jsonl")!r})

        def test_pre_fix_fuzzes_clean(lockstep_fuzz):
            lockstep_fuzz("computed-tokens", variant="pre-fix")
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "--lockstep-fuzz-examples=100", "--lockstep-fuzz-seed=0")
    result.assert_outcomes(failed=2)
    text = "\n".join(result.outlines)
    assert "violated at event 16" in text and "U3_bounded_slack is violated after" in text
    assert "lockstep_assert_conforms(" in text and 'lockstep_fuzz("computed-tokens"' in text
    assert "testing.py" not in text and "pytest_plugin.py" not in text and "raise AssertionError" not in text


def test_lockstep_fuzz_runs_under_the_hypothesis_profile_database_and_seed(pytester: pytest.Pytester) -> None:
    """The active settings profile's ``max_examples`` and example database apply (the failure is
    saved there, to be replayed first next time), and ``--hypothesis-seed`` chooses the examples
    (Hypothesis then leaves the database alone, as for any test)."""
    pytester.makeconftest(
        """
        from hypothesis import settings
        from hypothesis.database import DirectoryBasedExampleDatabase

        # derandomize=False: under CI=true Hypothesis's defaults are derandomized (seeds ignored)
        settings.register_profile(
            "mine", max_examples=40, derandomize=False, database=DirectoryBasedExampleDatabase("examples")
        )
        """
    )
    pytester.makepyfile(
        """
        import json

        def test_pre_fix(lockstep_fuzz):
            lockstep_fuzz("computed-tokens", variant="pre-fix")

        def test_post_fix(lockstep_fuzz):
            result = lockstep_fuzz("computed-tokens", variant="post-fix")
            with open("runs.jsonl", "a") as file:
                file.write(json.dumps([result.runs, result.steps_run, result.seed]) + "\\n")
        """
    )

    def run(*options: str) -> list[int]:
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--hypothesis-profile=mine", *options)
        result.assert_outcomes(passed=1, failed=1)
        assert "U3_bounded_slack is violated after" in result.stdout.str()
        runs: list[int] = json.loads((pytester.path / "runs.jsonl").read_text().splitlines()[-1])
        return runs

    runs, _, seed = run()
    assert 40 <= runs < 100 and seed is None, "the profile's 40 examples (and a few Hypothesis discarded)"
    assert any(path.is_file() for path in (pytester.path / "examples").rglob("*")), "saved in the profile's database"
    first = run("--hypothesis-seed=1")
    assert run("--hypothesis-seed=1") == first, "the same seed, the same examples"
    assert run("--hypothesis-seed=2") != first, "another seed, other examples"
