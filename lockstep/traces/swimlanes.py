"""A trace drawn as swimlanes in plain text, as a stream: one row per event, one column per actor.

``survey`` reads the records once and keeps only what the picture's shape needs (the actors,
the widest cell of each column, the number of events and the last index); ``write_swimlanes``
then reads them again and writes each row as its record arrives, so memory stays flat in the
trace's length and the first rows appear at once. Time runs down; the first column is the
event's index (``✗ N`` on the highlighted event), then one column per actor (ranks first, by
number, then the others in order of appearance), and, when the model names them, the source
functions each event's action mirrors. A collective's ``enter`` and ``complete`` sit in the
member's column as ``→ op(communicator)#n`` and ``✓ op(communicator)#n``; a communicator's own
step (actor ``group:NAME``, in model traces) is drawn across every rank's column as
``══ action ══``. Cells wider than their column wrap onto continuation lines; columns shrink
(widest first, to at least ``MIN_WIDTH``) to fit the width asked for.
"""

from __future__ import annotations

import functools
import json
import textwrap
import unicodedata
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import IO, Any

from lockstep.traces.reader import Record

MAX_WIDTH = 48  # a column's width before wrapping, however wide its cells
MIN_WIDTH = 8  # a column's width at least, however narrow the page
MIRRORS_TITLE = "mirrors (source)"
SEPARATOR = " │ "
HIGHLIGHT, MEMBERS, RESET = "\x1b[1;31m", "\x1b[35m", "\x1b[0m"


def printable(text: str) -> str:
    """``text`` with every character a terminal would act on (controls, escapes, bidi overrides) written
    as a Python escape: a trace is data, and drawing it must not move the cursor or recolour the screen."""
    return (
        text
        if text.isprintable()
        else "".join(character if character.isprintable() else ascii(character)[1:-1] for character in text)
    )


def cell(event: Mapping[str, Any]) -> str:
    """What an event's actor column shows: a collective's arrow and op, a group step, or ``action(args)``."""
    return printable(_cell(event))


def _cell(event: Mapping[str, Any]) -> str:
    action, arguments = str(event["action"]), dict(event["args"])
    clock = event.get("clock") or {}
    if action in ("enter", "complete"):
        communicator = arguments.pop("communicator", None) or (next(iter(clock)) if len(clock) == 1 else "?")
        op = arguments.pop("op", "collective")
        arrow = "→" if action == "enter" else "✓"
        return f"{arrow} {op}({communicator})#{clock.get(communicator, '?')}"
    if str(event["actor"]).startswith("group:"):
        return f"══ {action} ══"
    rendered = ", ".join(f"{name}={json.dumps(value, separators=(',', ':'))}" for name, value in arguments.items())
    return f"{action}({rendered})" if rendered else action


def width_of(text: str) -> int:
    """Terminal cells ``text`` takes: two for wide East Asian characters, none for combining marks."""
    if text.isascii():
        return len(text)
    return sum(
        0 if unicodedata.combining(character) else 2 if unicodedata.east_asian_width(character) in "WF" else 1
        for character in text
    )


def _actor_key(actor: str, order: Mapping[str, int]) -> tuple[int, int, str]:
    kind, _, number = actor.partition(":")
    return (0, int(number), actor) if kind == "rank" and number.isdigit() else (1, order[actor], actor)


@dataclass
class SwimlaneLayout:
    """The picture's shape: its title, columns and their widths, found by ``survey``."""

    title: str
    actors: list[str]
    mirrors: Mapping[str, str]
    widths: list[int]  # the index column, each actor's, then the mirrors column if any
    events: int = 0
    last_index: int | None = None
    mirrored: bool = False
    rank_columns: set[str] = field(default_factory=set)  # the columns a group step is drawn across

    def headings(self) -> list[str]:
        return ["#", *self.actors, *([MIRRORS_TITLE] if self.mirrored else [])]


def survey(
    header: Mapping[str, Any], records: Iterable[Record], mirrors: Mapping[str, str], page_width: int
) -> SwimlaneLayout:
    """Read ``records`` once for the picture's shape; ``mirrors`` maps an action to its source functions."""
    order: dict[str, int] = {}
    natural: dict[str, int] = {}
    group_cell = 0
    mirrored = False
    events, last_index = 0, None
    for record in records:
        event = record.event
        actor = str(event["actor"])
        text_width = width_of(cell(event))
        if actor.startswith("group:"):
            group_cell = max(group_cell, text_width)
        else:
            if actor not in order:
                order[actor] = len(order)
            natural[actor] = max(natural.get(actor, 0), text_width)
        mirrored = mirrored or bool(mirrors.get(str(event["action"])))
        events += 1
        last_index = int(event["index"])
    actors = sorted(order, key=lambda actor: _actor_key(actor, order))
    ranks = {actor for actor in actors if actor.startswith("rank:")}
    index_width = max(1, len(str(last_index or 0)) + 2)  # room for "✗ "
    widths = [index_width] + [
        min(MAX_WIDTH, max(width_of(actor), natural[actor], group_cell if actor in ranks else 0)) for actor in actors
    ]
    if mirrored:
        widths.append(min(MAX_WIDTH, max([len(MIRRORS_TITLE), *(width_of(text) for text in mirrors.values())])))
    _fit(widths, page_width)
    instance = header.get("instance") or ""
    title = printable(f"{header['protocol']} {header['variant']} {instance} ({header['source']['kind']})")
    return SwimlaneLayout(title, actors, mirrors, widths, events, last_index, mirrored, ranks)


def _fit(widths: list[int], page_width: int) -> None:
    """Shrink the widest columns (never the index column) until the row fits ``page_width``."""
    while sum(widths) + len(SEPARATOR) * (len(widths) - 1) > page_width:
        widest = max(range(1, len(widths)), key=lambda position: widths[position], default=None)
        if widest is None or widths[widest] <= MIN_WIDTH:
            return
        widths[widest] -= 1


def _fold(text: str, width: int) -> tuple[str, ...]:
    """``text`` in lines of at most ``width`` cells, broken at spaces where it can be."""
    cells = width_of(text)
    if cells <= width:
        return (text,)
    if cells == len(text):  # one cell per character: textwrap's counting is right
        return tuple(textwrap.wrap(text, width, break_on_hyphens=False)) or ("",)
    pieces, current, used = [], "", 0
    for character in text:
        size = width_of(character)
        if used + size > width and current:
            pieces.append(current)
            current, used = "", 0
        current += character
        used += size
    return (*pieces, current)


@functools.lru_cache(maxsize=4096)  # cells repeat (an action's mirrors, a collective's op): lay each out once
def _cell_lines(text: str, width: int) -> tuple[str, ...]:
    """``text`` folded to ``width`` and each line padded to it."""
    return tuple(piece + " " * (width - width_of(piece)) for piece in _fold(text, width))


def _row(cells: list[str], widths: list[int]) -> list[str]:
    laid_out = [_cell_lines(text, width) for text, width in zip(cells, widths)]
    height = max(len(lines) for lines in laid_out)
    if height == 1:
        return [SEPARATOR.join(lines[0] for lines in laid_out).rstrip()]
    return [
        SEPARATOR.join(
            lines[line] if line < len(lines) else " " * width for lines, width in zip(laid_out, widths)
        ).rstrip()
        for line in range(height)
    ]


def swimlane_lines(
    layout: SwimlaneLayout, records: Iterable[Record], highlight: int | None = None
) -> Iterator[tuple[str, str]]:
    """The picture's lines, one at a time, each with its style: "" plain, "highlight" or "members"."""
    widths = layout.widths
    yield layout.title, ""
    yield from ((line, "") for line in _row(layout.headings(), widths))
    yield "─┼─".join("─" * width for width in widths), ""
    blank = [""] * len(layout.actors)
    positions = {actor: position for position, actor in enumerate(layout.actors)}
    ranks = [positions[actor] for actor in layout.actors if actor in layout.rank_columns]
    for record in records:
        event = record.event
        index = int(event["index"])
        text = cell(event)
        row = list(blank)
        actor = str(event["actor"])
        joined = actor.startswith("group:")
        for position in ranks if joined else [positions.get(actor)]:
            if position is not None:  # None: an actor the survey did not see (the input changed since)
                row[position] = text
        number = f"✗ {index}" if index == highlight else str(index)
        mirror = [printable(layout.mirrors.get(str(event["action"]), ""))] if layout.mirrored else []
        style = "highlight" if index == highlight else "members" if joined else ""
        for line in _row([number.rjust(widths[0]), *row, *mirror], widths):
            yield line, style


def write_swimlanes(
    layout: SwimlaneLayout, records: Iterable[Record], file: IO[str], highlight: int | None = None, color: bool = False
) -> None:
    """Write the picture to ``file`` as the records arrive; ``color`` adds terminal colours."""
    styles = {"": ("", ""), "highlight": (HIGHLIGHT, RESET), "members": (MEMBERS, RESET)}
    for line, style in swimlane_lines(layout, records, highlight):
        start, end = styles[style] if color else ("", "")
        file.write(f"{start}{line}{end}\n")
