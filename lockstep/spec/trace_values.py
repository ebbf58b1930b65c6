"""Trace JSON values as model values: decoding ``args`` and ``observed`` against a model's sorts.

The inverse of ``Sort.to_json``: enum members by name (or by position), maps as lists in key
order (or objects keyed by the rendered key), sequences as lists, records as objects with every
field. A value that does not fit the sort, such as an integer beyond the bounds the header's
parameters give it, raises ``ValueMismatch`` naming where and why. Nothing here evaluates text.
"""

from __future__ import annotations

from lockstep.spec.sorts import (
    BoolSort,
    EnumSort,
    IndexSort,
    IntSort,
    MapSort,
    RecordSort,
    SequenceSort,
    Sort,
    Value,
)


class ValueMismatch(ValueError):
    """A JSON value that is not a value of the expected sort."""


def decode(sort: Sort, value: object, where: str) -> Value:
    """The model value of ``value`` at ``sort``; ``where`` names it in the message."""
    if isinstance(sort, BoolSort):
        if isinstance(value, bool):
            return value
        raise ValueMismatch(f"{where} must be true or false, got {_show(value)}")
    if isinstance(sort, (IntSort, IndexSort)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueMismatch(f"{where} must be an integer, got {_show(value)}")
        if not sort.contains(value):
            raise ValueMismatch(f"{where} = {value} is beyond its bounds ({_bounds(sort)})")
        return value
    if isinstance(sort, EnumSort):
        if isinstance(value, str):
            if value in sort.members:
                return sort.members.index(value)
            raise ValueMismatch(f"{where} = {value!r} is not one of {', '.join(sort.members)}")
        if isinstance(value, int) and not isinstance(value, bool) and sort.contains(value):
            return value
        raise ValueMismatch(f"{where} must be one of {', '.join(sort.members)}, got {_show(value)}")
    if isinstance(sort, MapSort):
        keys = sort.keys
        if isinstance(value, dict):
            names = {sort.key.render(key): position for position, key in enumerate(keys)}
            if set(value) != set(names):
                raise ValueMismatch(f"{where} must have the keys {', '.join(names)}, got {', '.join(map(str, value))}")
            items = [value[name] for name in names]
        elif isinstance(value, list):
            if len(value) != len(keys):
                raise ValueMismatch(
                    f"{where} must list {len(keys)} entries (one per {sort.key.name}), got {len(value)}"
                )
            items = value
        else:
            raise ValueMismatch(f"{where} must be a list of {len(keys)} entries, got {_show(value)}")
        return tuple(decode(sort.value, item, f"{where}[{sort.key.render(key)}]") for key, item in zip(keys, items))
    if isinstance(sort, SequenceSort):
        if not isinstance(value, list):
            raise ValueMismatch(f"{where} must be a list, got {_show(value)}")
        if len(value) > sort.capacity:
            raise ValueMismatch(f"{where} holds {len(value)} elements, beyond its capacity {sort.capacity}")
        return tuple(decode(sort.element, item, f"{where}[{position}]") for position, item in enumerate(value))
    if isinstance(sort, RecordSort):
        if not isinstance(value, dict):
            raise ValueMismatch(
                f"{where} must be an object with fields {', '.join(n for n, _ in sort.fields)}, got {_show(value)}"
            )
        fields = [name for name, _ in sort.fields]
        if set(value) != set(fields):
            raise ValueMismatch(f"{where} must have the fields {', '.join(fields)}, got {', '.join(map(str, value))}")
        return tuple(decode(field, value[name], f"{where}.{name}") for name, field in sort.fields)
    raise ValueMismatch(f"{where}: values of sort {sort.name} cannot appear in a trace")


def decode_key(sort: MapSort, text: str, where: str) -> int:
    """The position of the key written ``text`` (``1``, ``PAUSED``) in a map's key order."""
    for position, key in enumerate(sort.keys):
        if sort.key.render(key) == text:
            return position
    choices = ", ".join(sort.key.render(key) for key in sort.keys)
    raise ValueMismatch(f"{where}: {text!r} is not a key of {sort.name} ({choices})")


def _bounds(sort: IntSort | IndexSort) -> str:
    if isinstance(sort, IndexSort):
        return f"{sort.name} is 0..{sort.count - 1}"
    return f"{sort.low}..{sort.high}"


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
