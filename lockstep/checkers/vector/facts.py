"""What a tuple's guard tells about the fields of the rows it enables, and how a field is decoded.

A successor block runs only on the rows where its guard holds, so every conjunct of the guard of
the form ``field == c``, ``field != c``, ``field <= c`` (and the other comparisons with a constant),
``flag`` or ``not flag`` narrows that field's range in the block: a field the guard pins becomes a
constant there and everything computed from it folds at compile time (decoding, the error masks of
a key it selects, range checks, ``where`` over it), and a narrowed range lets the bounds decide more
comparisons. ``guard_facts`` reads the conjuncts off the generated code of the guard (a tree of
``&`` over comparisons of decoded columns); ``column_code`` is the one spelling of a decoded column,
shared with the translator so that the two agree.
"""

from __future__ import annotations

import re

from lockstep.checkers.vector.values import Scalar, Scope
from lockstep.spec.expressions import Operator
from lockstep.spec.layout import Layout, Leaf

_CONJUNCTION = re.compile(r"^\((t\d+) & (t\d+)\)$")
_NEGATION = re.compile(r"^\(~(t\d+)\)$")
_COMPARISON = re.compile(r"^\((t\d+) (==|!=|<=|>=|<|>) (-?\d+)\)$")
_BIT_TEST = re.compile(r"^\(\((\w+)\[(\d+)\] & (\d+)\) (==|!=) 0\)$")


def column_code(leaf: Leaf, words: str) -> str:
    """The code that decodes ``leaf`` (of non-zero width) from the (words x rows) array ``words``:
    a truth value for a Boolean, the value (``low`` added back) for the others."""
    code = f"{words}[{leaf.word}]"
    if leaf.boolean:  # one bit: test it in place
        return f"(({code} & {1 << leaf.shift}) != 0)"
    if leaf.shift:
        code = f"({code} >> {leaf.shift})"
    if leaf.width + leaf.shift < 63:
        code = f"({code} & {leaf.mask})"
    if leaf.low:
        code = f"({code} + {leaf.low})"
    return code


def bit_test(leaf: Leaf, words: str, value: object, operator: Operator) -> str | None:
    """``leaf == value`` (or ``!=``) as one test of its bit in place, for a one-bit integer field
    (None for any other field or value)."""
    if leaf.width != 1 or leaf.boolean or value not in (leaf.low, leaf.low + 1) or isinstance(value, bool):
        return None
    is_set = (value == leaf.low + 1) == (operator is Operator.EQUAL)
    return f"(({words}[{leaf.word}] & {1 << leaf.shift}) {'!=' if is_set else '=='} 0)"


def merged_test(first: str, second: str, symbol: str) -> str | None:
    """One test for two tests of bits of one word: both ``!= 0`` (some bit set: their ``|``) or both
    ``== 0`` (all clear: their ``&``) given the definitions; None when they are not such a pair."""
    first_test, second_test = _BIT_TEST.match(first), _BIT_TEST.match(second)
    if first_test is None or second_test is None or first_test.group(4) != symbol or second_test.group(4) != symbol:
        return None
    if first_test.group(1, 2) != second_test.group(1, 2):
        return None
    words, word = first_test.group(1, 2)
    return f"(({words}[{word}] & {int(first_test.group(3)) | int(second_test.group(3))}) {symbol} 0)"


def guard_facts(layout: Layout, scope: Scope, guard: Scalar) -> dict[int, tuple[int, int]]:
    """The ranges (leaf position -> (low, high), a Boolean as 0/1) that the conjuncts of ``guard``,
    computed in ``scope``, imply for every row where it holds. Fields it says nothing of are absent."""
    bits = {(leaf.word, 1 << leaf.shift): leaf for leaf in layout.leaves if leaf.width == 1}
    facts: dict[int, tuple[int, int]] = {}

    def narrow(leaf: Leaf, low: int, high: int) -> None:
        known_low, known_high = facts.get(leaf.position, (leaf.low, leaf.high))
        facts[leaf.position] = (max(known_low, low), min(known_high, high))

    def bit(code: str, negated: bool) -> None:  # one-bit fields tested in place
        test = _BIT_TEST.match(code)
        if test is None or test.group(1) != scope.words:
            return
        word, mask, is_set = int(test.group(2)), int(test.group(3)), (test.group(4) == "!=") != negated
        if is_set and mask & (mask - 1):
            return  # some bit of several is set: nothing known of each
        for shift in range(mask.bit_length()):
            leaf = bits.get((word, 1 << shift)) if mask >> shift & 1 else None
            if leaf is not None:
                narrow(leaf, leaf.low + is_set, leaf.low + is_set)

    pending = [guard.code]
    while pending:
        code = scope.codes.get(pending.pop())
        if code is None:
            continue
        conjunction = _CONJUNCTION.match(code)
        negation = _NEGATION.match(code)
        comparison = _COMPARISON.match(code)
        if conjunction is not None:
            pending.extend(conjunction.groups())
        elif negation is not None:
            bit(scope.codes.get(negation.group(1), ""), True)
        elif comparison is None:
            bit(code, False)
        elif comparison.group(1) in scope.leaves:
            name, symbol, number = comparison.groups()
            leaf, value = layout.leaves[scope.leaves[name]], int(number)
            low, high = facts.get(leaf.position, (leaf.low, leaf.high))
            if symbol == "==":
                narrow(leaf, value, value)
            elif symbol == "!=" and value in (low, high):
                narrow(leaf, low + (value == low), high - (value == high))
            elif symbol in ("<", "<="):
                narrow(leaf, leaf.low, value - (symbol == "<"))
            elif symbol in (">", ">="):
                narrow(leaf, value + (symbol == ">"), leaf.high)
    # an empty range: the guard never holds (its block never runs); claim nothing rather than nonsense
    return {position: bounds for position, bounds in facts.items() if bounds[0] <= bounds[1]}


def decided(operator: Operator, left: tuple[int, int], right: tuple[int, int]) -> bool | None:
    """The outcome of comparing any value within ``left``'s bounds with any within ``right``'s, when
    the bounds decide it (None: they do not, or ``operator`` is no comparison)."""
    if operator is Operator.GREATER:
        return decided(Operator.LESS, right, left)
    if operator is Operator.GREATER_EQUAL:
        return decided(Operator.LESS_EQUAL, right, left)
    if operator is Operator.LESS:
        return True if left[1] < right[0] else False if left[0] >= right[1] else None
    if operator is Operator.LESS_EQUAL:
        return True if left[1] <= right[0] else False if left[0] > right[1] else None
    if operator in (Operator.EQUAL, Operator.NOT_EQUAL):
        disjoint = left[1] < right[0] or right[1] < left[0]
        same = True if left[0] == left[1] == right[0] == right[1] else False if disjoint else None
        return same if same is None or operator is Operator.EQUAL else not same
    return None


__all__ = ["bit_test", "column_code", "decided", "guard_facts", "merged_test"]
