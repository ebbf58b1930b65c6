"""What is wrong with a parsed trace line, in words, derived from the line types of ``schema``.

``line_problems(value, line_type, what)`` walks ``msgspec.inspect.type_info`` of a line type
(``HeaderLine`` or ``EventLine``) next to a parsed JSON value and lists every problem in field order:
missing fields, then unexpected ones, then each field whose value does not fit its type, with the
value it got (``field 'index' must be a non-negative integer, got -1``). A field's expectation is
worded from its type (a ``Literal`` lists its values, ``str`` with ``min_length=1`` is "a non-empty
string", ``int`` with ``ge=0`` "a non-negative integer"), or taken from the ``expected`` entry of
its ``Meta(extra=...)`` where a pattern needs words. Values of free-form fields (``args``,
``observed``, ``parameters``) must be JSON: objects with string keys, arrays, strings, finite
numbers, Booleans and null (``json_value_problems``), which is what a writer must check before it
encodes Python values. The messages agree with the decoder: a test holds them to it.
"""

from __future__ import annotations

import functools
import math
import re
from typing import Any

import msgspec
from msgspec import inspect


def describe(value: object) -> str:
    """``repr(value)``, cut to 80 characters."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def line_problems(value: object, line_type: type[msgspec.Struct], what: str) -> list[str]:
    """Everything wrong with ``value`` as a line of ``line_type``; empty when it fits. ``what`` names
    the line in the one message for a value that is not an object at all ("header", "event")."""
    if not isinstance(value, dict):
        return [f"{what} must be a JSON object, got {describe(value)}"]
    return _struct_problems(value, _type_info(line_type), "")


@functools.cache
def _type_info(line_type: type[msgspec.Struct]) -> inspect.StructType:
    info = inspect.type_info(line_type)
    assert isinstance(info, inspect.StructType)
    return info


def _struct_problems(value: dict[Any, Any], info: inspect.StructType, prefix: str) -> list[str]:
    names = [field.encode_name for field in info.fields]
    problems = [
        f"missing field '{prefix}{field.encode_name}'"
        for field in info.fields
        if field.required and field.encode_name not in value
    ]
    if info.forbid_unknown_fields:
        problems.extend(f"unexpected field '{prefix}{key}'" for key in value if key not in names)
    for field in info.fields:
        if field.encode_name in value:
            problems.extend(_value_problems(value[field.encode_name], field.type, prefix + field.encode_name))
    return problems


def _value_problems(value: object, kind: inspect.Type, path: str) -> list[str]:
    """Problems of one field's value: a wrong kind of value, or problems inside an object."""
    bare = kind.type if isinstance(kind, inspect.Metadata) else kind
    if not _fits(value, bare):
        return [f"field {path!r} must be {_expected(kind)}, got {describe(value)}"]
    if isinstance(bare, inspect.StructType):
        assert isinstance(value, dict)
        return _struct_problems(value, bare, path + ".")
    if isinstance(bare, inspect.DictType):
        assert isinstance(value, dict)
        problems: list[str] = []
        for key, item in value.items():
            if not _fits(key, _bare(bare.key_type)):
                _, noun = _expected(bare.key_type).split(" ", 1)
                problems.append(f"field {path!r} must have {noun} keys, got {describe(key)}")
            else:
                problems.extend(_value_problems(item, bare.value_type, f"{path}.{key}"))
        return problems
    if isinstance(bare, inspect.AnyType):
        return json_value_problems(value, path)
    return []


def _bare(kind: inspect.Type) -> inspect.Type:
    return kind.type if isinstance(kind, inspect.Metadata) else kind


def _is_integer(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _fits(value: object, kind: inspect.Type) -> bool:
    """Whether ``value`` has the kind the decoder wants (nested values aside)."""
    kind = _bare(kind)
    if isinstance(kind, inspect.StrType):
        return (
            isinstance(value, str)
            and len(value) >= (kind.min_length or 0)
            and (kind.max_length is None or len(value) <= kind.max_length)
            and (kind.pattern is None or re.search(kind.pattern, value) is not None)
        )
    if isinstance(kind, inspect.IntType):
        return _is_integer(value) and _within(value, kind)
    if isinstance(kind, inspect.LiteralType):
        return any(type(value) is type(option) and value == option for option in kind.values)
    if isinstance(kind, inspect.NoneType):
        return value is None
    if isinstance(kind, inspect.UnionType):
        return any(_fits(value, option) for option in kind.types)
    if isinstance(kind, (inspect.DictType, inspect.StructType)):
        return isinstance(value, dict)
    if isinstance(kind, inspect.AnyType):
        return True
    raise TypeError(f"no check for {kind!r} in a trace line type")  # pragma: no cover - the line types use none


def _within(value: Any, kind: inspect.IntType) -> bool:
    return (
        (kind.ge is None or value >= kind.ge)
        and (kind.gt is None or value > kind.gt)
        and (kind.le is None or value <= kind.le)
        and (kind.lt is None or value < kind.lt)
    )


def _expected(kind: inspect.Type) -> str:
    """What a value of ``kind`` must be, in words with an article ("a non-empty string")."""
    if isinstance(kind, inspect.Metadata):
        if kind.extra and "expected" in kind.extra:
            return str(kind.extra["expected"])
        kind = kind.type
    if isinstance(kind, inspect.StrType):
        return "a non-empty string" if kind.min_length else "a string"
    if isinstance(kind, inspect.IntType):
        return "a non-negative integer" if kind.ge == 0 and kind.gt is kind.le is kind.lt is None else "an integer"
    if isinstance(kind, inspect.LiteralType):
        return " or ".join(repr(option) for option in kind.values)
    if isinstance(kind, inspect.NoneType):
        return "null"
    if isinstance(kind, inspect.UnionType):
        return " or ".join(_expected(option) for option in kind.types)
    if isinstance(kind, (inspect.DictType, inspect.StructType)):
        return "a JSON object"
    return "a JSON value"


def json_value_problems(value: object, path: str) -> list[str]:
    """Problems with a nested JSON value: only dict, list, str, finite numbers, bool and None."""
    if value is None or isinstance(value, (str, bool, int)):
        return []
    if isinstance(value, float):
        return [] if math.isfinite(value) else [f"field {path!r} must be a finite number, got {value!r}"]
    if isinstance(value, list):
        problems: list[str] = []
        for position, item in enumerate(value):
            problems.extend(json_value_problems(item, f"{path}[{position}]"))
        return problems
    if isinstance(value, dict):
        problems = []
        for key, item in value.items():
            if not isinstance(key, str):
                problems.append(f"field {path!r} must have string keys, got {describe(key)}")
            else:
                problems.extend(json_value_problems(item, f"{path}.{key}"))
        return problems
    return [f"field {path!r} must be a JSON value, got {type(value).__name__} {describe(value)}"]
