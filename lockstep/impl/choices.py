"""The one source of every nondeterministic choice a runtime run makes.

Which channel's message reaches an engine's input queue next, how long a delivery is delayed,
which rank a request is placed on, in which order the client calls the ranks: every such choice
is asked of a ``ChoiceSource`` as ``choose(actor, point, options)``. Options are strings, so a
run's choices are plain data (``Choice`` records) that can be written down and fed back.

- ``SeededChoices(seed)``: a pseudo-random choice per actor, from a generator seeded with
  ``f"{seed}/{actor}"``; each process owns its actors' generators, so the choices of one actor
  do not depend on how the processes interleave.
- ``ScriptedChoices(script, fallback)``: the choices listed per actor, taken in order (a recorded
  run's choices, or those ``lockstep reproduce`` derives from a model counterexample). A listed
  choice whose point or option does not fit what the runtime asks raises ``ChoiceDivergence``;
  when an actor's list runs out, the fallback source answers (or ``ChoiceDivergence`` without one).
  An entry at point ``*`` whose choice is ``#k`` (``indexed``) takes option k modulo the number
  of options at whatever point the actor asks next: runtime-against-model fuzzing draws these.

Every choice made is kept in ``made`` and, when a ``log`` path is given, appended to it as one
JSON line as soon as it is made, so a killed run still tells which choices it made. A script's
``ChoiceDivergence`` is also written beside that log (``<actor>.diverged``, one JSON object) before
it is raised, so the launcher reports it (``read_divergence``) however the process then ends.

A ``--choices`` file is read by ``read_script``: every line is checked before anything runs (UTF-8
JSON, an object with string ``actor``, ``point`` and ``chosen`` and optional ``options``, a known
actor, ``chosen`` among the line's own options, ``#k`` only at point ``*``), and the first bad line
raises ``ChoicesInputError`` naming the file, the line and the problem. Each ``Choice`` keeps its
line, so a divergence names where in the file the choice that did not fit is.
"""

from __future__ import annotations

import json
import os
import random
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ANY_POINT = "*"
INDEX = re.compile(r"#[0-9]+")  # an indexed choice: option k (modulo the options offered) at point ``*``
FIELDS = ("actor", "point", "options", "chosen")


class ChoiceDivergence(RuntimeError):
    """A scripted choice that the run cannot take (wrong point, option not offered, script exhausted);
    with the script's file (``path``), ``str()`` is ``FILE:LINE: problem``."""

    def __init__(self, problem: str, path: str | None = None, line: int = 0) -> None:
        self.problem, self.path, self.line = problem, path, line
        super().__init__(problem if path is None else f"{path}:{line}: {problem}")

    def to_json(self) -> dict[str, Any]:
        return {"problem": self.problem, "path": self.path, "line": self.line}

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> ChoiceDivergence:
        path = value.get("path")
        return cls(str(value["problem"]), None if path is None else str(path), int(value.get("line") or 0))


class ChoicesInputError(ValueError):
    """A choices file that cannot be read as choices; ``str()`` is ``FILE:LINE: problem``."""

    def __init__(self, path: str | os.PathLike[str], line: int, problem: str) -> None:
        self.path, self.line, self.problem = str(path), line, problem
        super().__init__(f"{self.path}:{line}: {problem}")


@dataclass(frozen=True)
class Choice:
    """One choice: who made it, at which kind of point, among which options, and what was chosen."""

    actor: str
    point: str
    options: tuple[str, ...]
    chosen: str
    line: int = field(default=0, compare=False)  # its line in the script file it was read from (0: none)

    def to_json(self) -> dict[str, Any]:
        return {"actor": self.actor, "point": self.point, "options": list(self.options), "chosen": self.chosen}

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> Choice:
        return cls(
            str(value["actor"]),
            str(value["point"]),
            tuple(str(o) for o in value.get("options", ())),
            str(value["chosen"]),
        )


class ChoiceSource:
    """Answers ``choose``; subclasses decide how (``_pick``). Keeps every choice in ``made``."""

    def __init__(self, log: str | os.PathLike[str] | None = None) -> None:
        self.made: list[Choice] = []
        self._log = None if log is None else Path(log)

    def choose(self, actor: str, point: str, options: Sequence[str]) -> str:
        """One of ``options`` (non-empty) for ``actor`` at a point of kind ``point``."""
        if not options:
            raise ValueError(f"{actor}: no options to choose from at {point}")
        chosen = self._pick(actor, point, tuple(options))
        choice = Choice(actor, point, tuple(options), chosen)
        self.made.append(choice)
        if self._log is not None:
            with open(self._log, "a", encoding="utf-8") as file:
                file.write(json.dumps(choice.to_json()) + "\n")
        return chosen

    def peek(self, actor: str, point: str, possible: Collection[str] | None = None) -> str | None:
        """The option ``actor``'s next choice will take at ``point`` if that is fixed in advance
        (a script), else None. A runtime waits for that option to become available before asking;
        ``possible`` (every option the point can ever offer) lets a script refuse one that never will."""
        return None

    def _pick(self, actor: str, point: str, options: tuple[str, ...]) -> str:
        raise NotImplementedError


class SeededChoices(ChoiceSource):
    """Pseudo-random choices, reproducible per actor from the seed."""

    def __init__(self, seed: int, log: str | os.PathLike[str] | None = None) -> None:
        super().__init__(log)
        self.seed = seed
        self._generators: dict[str, random.Random] = {}

    def _pick(self, actor: str, point: str, options: tuple[str, ...]) -> str:
        generator = self._generators.get(actor)
        if generator is None:
            generator = self._generators[actor] = random.Random(f"{self.seed}/{actor}")
        return options[generator.randrange(len(options))]


class ScriptedChoices(ChoiceSource):
    """Choices fed from a list (per actor, in order); the fallback answers beyond the list."""

    def __init__(
        self,
        script: Sequence[Choice],
        fallback: ChoiceSource | None = None,
        log: str | os.PathLike[str] | None = None,
        source: str | None = None,
    ) -> None:
        """``source``: the file the script was read from, named with each choice's line in a divergence."""
        super().__init__(log)
        self._script: dict[str, list[Choice]] = {}
        for choice in script:
            self._script.setdefault(choice.actor, []).append(choice)
        self._position: dict[str, int] = {}
        self.fallback = fallback
        self.source = source

    def peek(self, actor: str, point: str, possible: Collection[str] | None = None) -> str | None:
        """As ``ChoiceSource.peek``; a scripted option outside ``possible`` is a ``ChoiceDivergence``
        now (waiting for it would hang the run)."""
        listed = self._script.get(actor, [])
        position = self._position.get(actor, 0)
        if position < len(listed) and listed[position].point == point:
            choice = listed[position]
            if possible is not None and choice.chosen not in possible:
                raise self._diverged(
                    choice,
                    f"{actor}: scripted choice #{position + 1} is {choice.chosen!r} at {point}, but the run offers "
                    f"{point} only among {', '.join(sorted(possible))}",
                )
            return choice.chosen
        return None  # an indexed entry names no option in advance

    def _pick(self, actor: str, point: str, options: tuple[str, ...]) -> str:
        listed = self._script.get(actor, [])
        position = self._position.get(actor, 0)
        if position >= len(listed):
            if self.fallback is None:
                raise self._diverged(
                    None, f"{actor}: the script has no choice left for {point} among {', '.join(options)}"
                )
            return self.fallback.choose(actor, point, options)
        choice = listed[position]
        self._position[actor] = position + 1
        if choice.point == ANY_POINT and INDEX.fullmatch(choice.chosen):
            return options[int(choice.chosen[1:]) % len(options)]
        if choice.point != point or choice.chosen not in options:
            raise self._diverged(
                choice,
                f"{actor}: scripted choice #{position + 1} is {choice.chosen!r} at {choice.point}, but the run asks "
                f"{point} among {', '.join(options)}",
            )
        return choice.chosen

    def _diverged(self, choice: Choice | None, problem: str) -> ChoiceDivergence:
        """The divergence, written beside the choice log first (``read_divergence``): the process
        that raises it may die in any way, and the launcher still names the choice that did not fit."""
        error = ChoiceDivergence(problem, self.source, 0 if choice is None else choice.line)
        if self._log is not None:
            record = self._log.with_suffix(".diverged")
            partial = record.with_suffix(".diverged-partial")
            try:
                partial.write_text(json.dumps(error.to_json()), encoding="utf-8")
                os.replace(partial, record)  # whole or absent for a reader
            except OSError:  # the run directory is gone: the exception itself is all there is
                pass
        return error


def indexed(actor: str, indices: Sequence[int]) -> list[Choice]:
    """Script entries for ``actor`` that take option ``k`` (modulo the options offered) at its
    next choices, whatever their points: drawn by runtime-against-model fuzzing."""
    return [Choice(actor, ANY_POINT, (), f"#{index}") for index in indices]


def read_choices(path: str | os.PathLike[str]) -> list[Choice]:
    """The choices in a JSON Lines log written by a ``ChoiceSource`` (a cut-off last line is skipped)."""
    found = []
    with open(path, encoding="utf-8") as file:
        for line in file:
            if line.endswith("\n"):
                found.append(Choice.from_json(json.loads(line)))
    return found


def read_divergence(folder: str | os.PathLike[str]) -> ChoiceDivergence | None:
    """The divergence a process of the run wrote to ``folder`` (the run's ``choices`` folder), or None;
    of several, the one earliest in the script."""
    found = []
    for record in Path(folder).glob("*.diverged"):
        try:
            found.append(ChoiceDivergence.from_json(json.loads(record.read_text(encoding="utf-8"))))
        except (OSError, ValueError, KeyError, TypeError):
            continue  # not one this module wrote
    return min(found, key=lambda error: (error.line, error.problem), default=None)


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON value")


_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)
_KINDS = {dict: "an object", list: "an array", str: "a string", bool: "true or false", type(None): "null"}


def _text(value: object) -> str | None:
    """``value`` as an option's text: strings as they are, integers written out (JSON numbers a hand
    written script may use), else None."""
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def _shown(value: object) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:39] + "…"


def _line_value(data: bytes, path: str, line: int) -> object:
    """One line's JSON value; a ``ChoicesInputError`` for bytes that are not one UTF-8 JSON value."""
    if b"\x00" in data:
        raise ChoicesInputError(path, line, "binary data (a NUL byte), not a JSON Lines choices file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ChoicesInputError(path, line, f"not UTF-8 text (byte {error.start + 1}): a binary file?") from None
    if not text.strip():
        raise ChoicesInputError(path, line, "blank line: a choices file holds one JSON object per line")
    try:
        return _DECODER.decode(text.rstrip("\r\n"))  # columns count within the line
    except RecursionError:
        raise ChoicesInputError(path, line, "JSON nested too deeply") from None
    except ValueError as error:
        column = getattr(error, "colno", None)
        where = f" at column {column}" if column is not None else ""
        cut = "" if data.endswith(b"\n") else " (the final line is cut short: no newline)"
        message = re.sub(r"( starting)? at$", "", str(getattr(error, "msg", error)))  # the column says where
        raise ChoicesInputError(path, line, f"malformed JSON{where}: {message}{cut}") from None


def _checked(value: object, path: str, line: int, actors: Collection[str] | None) -> Choice:
    """The choice one parsed line holds; a ``ChoicesInputError`` saying what is wrong with it."""
    if not isinstance(value, dict):
        kind = _KINDS.get(type(value), "a number")
        raise ChoicesInputError(path, line, f"expected a JSON object with actor, point and chosen, got {kind}")
    unknown = [name for name in value if name not in FIELDS]
    if unknown:
        raise ChoicesInputError(path, line, f"unknown field {unknown[0]!r} (a choice has {', '.join(FIELDS)})")
    texts: dict[str, str] = {}
    for name in ("actor", "point", "chosen"):
        if name not in value:
            raise ChoicesInputError(path, line, f"missing field {name!r} (a choice has {', '.join(FIELDS)})")
        text = value[name] if name != "chosen" else _text(value[name])
        if not isinstance(text, str) or not text:
            raise ChoicesInputError(path, line, f"{name!r} must be a non-empty string, got {_shown(value[name])}")
        texts[name] = text
    listed = value.get("options", [])
    options = [_text(option) for option in listed] if isinstance(listed, list) else [None]
    if any(option is None for option in options):
        raise ChoicesInputError(path, line, f"'options' must be a list of strings, got {_shown(listed)}")
    actor, point, chosen = texts["actor"], texts["point"], texts["chosen"]
    if actors is not None and actor not in actors:
        raise ChoicesInputError(
            path, line, f"unknown actor {actor!r}: the actors that make this run's choices are {', '.join(actors)}"
        )
    if point == ANY_POINT and not INDEX.fullmatch(chosen):
        raise ChoicesInputError(
            path, line, f"at point '*' the choice is an index, '#' and a whole number ('#2'), got {chosen!r}"
        )
    if point != ANY_POINT and chosen.startswith("#") and chosen not in options:
        raise ChoicesInputError(path, line, f"{chosen!r} is an index ('#k'), which only point '*' takes")
    if options and chosen not in options:
        raise ChoicesInputError(
            path, line, f"chosen {chosen!r} is not one of the line's options ({', '.join(map(str, options))})"
        )
    return Choice(actor, point, tuple(str(option) for option in options), chosen, line)


def read_script(path: str | os.PathLike[str], actors: Collection[str] | None = None) -> list[Choice]:
    """The choices of a ``--choices`` file, every line checked (see the module doc): the first bad
    line raises ``ChoicesInputError``. ``actors``: the actors that make the run's choices (None: any)."""
    name = str(path)
    found = []
    try:
        with open(path, "rb") as file:
            for line, data in enumerate(file, start=1):
                found.append(_checked(_line_value(data, name, line), name, line, actors))
    except OSError as error:
        raise ChoicesInputError(name, 0, f"cannot read: {error.strerror or error}") from None
    return found


def choice_source(
    seed: int,
    script: Sequence[Choice] | None = None,
    log: str | os.PathLike[str] | None = None,
    source: str | None = None,
) -> ChoiceSource:
    """The run's choice source: the script (falling back to the seed) if one is given, else the seed;
    ``source`` names the script's file in a divergence."""
    if script is None:
        return SeededChoices(seed, log)
    return ScriptedChoices(script, SeededChoices(seed), log, source)
