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
JSON line as soon as it is made, so a killed run still tells which choices it made.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class ChoiceDivergence(RuntimeError):
    """A scripted choice that the run cannot take (wrong point, option not offered, script exhausted)."""


@dataclass(frozen=True)
class Choice:
    """One choice: who made it, at which kind of point, among which options, and what was chosen."""

    actor: str
    point: str
    options: tuple[str, ...]
    chosen: str

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

    def peek(self, actor: str, point: str) -> str | None:
        """The option ``actor``'s next choice will take at ``point`` if that is fixed in advance
        (a script), else None. A runtime waits for that option to become available before asking."""
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
        self, script: Sequence[Choice], fallback: ChoiceSource | None = None, log: str | os.PathLike[str] | None = None
    ) -> None:
        super().__init__(log)
        self._script: dict[str, list[Choice]] = {}
        for choice in script:
            self._script.setdefault(choice.actor, []).append(choice)
        self._position: dict[str, int] = {}
        self.fallback = fallback

    def peek(self, actor: str, point: str) -> str | None:
        listed = self._script.get(actor, [])
        position = self._position.get(actor, 0)
        if position < len(listed) and listed[position].point == point:
            return listed[position].chosen
        return None  # an indexed entry names no option in advance

    def _pick(self, actor: str, point: str, options: tuple[str, ...]) -> str:
        listed = self._script.get(actor, [])
        position = self._position.get(actor, 0)
        if position >= len(listed):
            if self.fallback is None:
                raise ChoiceDivergence(f"{actor}: the script has no choice left for {point} among {', '.join(options)}")
            return self.fallback.choose(actor, point, options)
        choice = listed[position]
        self._position[actor] = position + 1
        if choice.point == ANY_POINT and choice.chosen.startswith("#"):
            return options[int(choice.chosen[1:]) % len(options)]
        if choice.point != point or choice.chosen not in options:
            raise ChoiceDivergence(
                f"{actor}: scripted choice #{position + 1} is {choice.chosen!r} at {choice.point}, but the run asks "
                f"{point} among {', '.join(options)}"
            )
        return choice.chosen


ANY_POINT = "*"


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


def choice_source(
    seed: int, script: Sequence[Choice] | None = None, log: str | os.PathLike[str] | None = None
) -> ChoiceSource:
    """The run's choice source: the script (falling back to the seed) if one is given, else the seed."""
    if script is None:
        return SeededChoices(seed, log)
    return ScriptedChoices(script, SeededChoices(seed), log)
