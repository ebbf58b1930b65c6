"""Sorts shared by the expression tests (terms, evaluation)."""

from __future__ import annotations

from lockstep.spec.sorts import BOOL, IndexSort, MapSort, SequenceSort, enum, integers, record

Color = enum("Color", ["RED", "GREEN", "BLUE"])
Rank = IndexSort("Rank", 2)
Small = integers(0, 3)
Pair = record("Pair", count=Small, on=BOOL)
Queue = SequenceSort(Small, 2)
Table = MapSort(Rank, Small)
