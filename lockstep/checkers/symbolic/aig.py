"""And-inverter graphs: the gates, a bit-blaster of Z3 bit-vector terms, and the AIGER writer.

An ``Aig`` holds literals as AIGER numbers them (``2 * variable + negated``; 0 is false, 1 is
true): the inputs first, then the latches, then the AND gates, each gate after its operands.
Gates are hashed structurally and folded where an operand is constant, so the circuit stays
close to the logic that matters. Words are lists of literals, least significant bit first, in
two's complement.

``Blaster`` turns the quantifier-free bit-vector terms the symbolic encoding builds (Boolean
connectives, ``ite``, equality, signed comparisons, addition, subtraction, negation,
multiplication and signed division) into words and literals. Its leaves are given by the
caller: a function from a Z3 constant to its word (or literal), so a state variable reads its
latches and an undefined value reads zero bits.
"""

from __future__ import annotations

from collections.abc import Callable

import z3

Word = list[int]
FALSE, TRUE = 0, 1


def invert(literal: int) -> int:
    return literal ^ 1


def _number(value: int) -> bytes:
    """AIGER's 7-bit variable-length encoding of a non-negative integer."""
    out = bytearray()
    while value & ~0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


class Aig:
    """A sequential AIG with zero-initialised latches and one output per bad condition."""

    def __init__(self) -> None:
        self.inputs = 0
        self.latches: list[int] = []  # latch variable -> its next-state literal (set later)
        self.outputs: list[int] = []
        self.gates: list[tuple[int, int]] = []  # per AND gate: its two operand literals
        self._hashed: dict[tuple[int, int], int] = {}
        self._first_gate: int | None = None

    def add_input(self) -> int:
        if self.latches or self.gates:
            raise ValueError("inputs come before latches and gates")
        self.inputs += 1
        return 2 * self.inputs

    def add_latch(self) -> int:
        if self.gates:
            raise ValueError("latches come before gates")
        self.latches.append(FALSE)
        return 2 * (self.inputs + len(self.latches))

    def set_next(self, latch: int, literal: int) -> None:
        self.latches[latch // 2 - self.inputs - 1] = literal

    def conjunction(self, left: int, right: int) -> int:
        if left == FALSE or right == FALSE or left == invert(right):
            return FALSE
        if left == TRUE or left == right:
            return right
        if right == TRUE:
            return left
        key = (max(left, right), min(left, right))
        found = self._hashed.get(key)
        if found is None:
            self.gates.append(key)
            found = 2 * (self.inputs + len(self.latches) + len(self.gates))
            self._hashed[key] = found
        return found

    def disjunction(self, left: int, right: int) -> int:
        return invert(self.conjunction(invert(left), invert(right)))

    def exclusive(self, left: int, right: int) -> int:
        return self.disjunction(self.conjunction(left, invert(right)), self.conjunction(invert(left), right))

    def choose(self, condition: int, then: int, otherwise: int) -> int:
        if then == otherwise:
            return then
        return self.disjunction(self.conjunction(condition, then), self.conjunction(invert(condition), otherwise))

    def all_of(self, literals: list[int]) -> int:
        result = TRUE
        for literal in literals:
            result = self.conjunction(result, literal)
        return result

    def any_of(self, literals: list[int]) -> int:
        result = FALSE
        for literal in literals:
            result = self.disjunction(result, literal)
        return result

    # ---------------------------------------------------------------------------------- words
    def constant(self, value: int, width: int) -> Word:
        return [TRUE if (value >> bit) & 1 else FALSE for bit in range(width)]

    def add(self, left: Word, right: Word, carry: int = FALSE) -> Word:
        total = []
        for a, b in zip(left, right, strict=True):
            half = self.exclusive(a, b)
            total.append(self.exclusive(half, carry))
            carry = self.disjunction(self.conjunction(a, b), self.conjunction(half, carry))
        return total

    def subtract(self, left: Word, right: Word) -> Word:
        return self.add(left, [invert(bit) for bit in right], TRUE)

    def negative(self, word: Word) -> Word:
        return self.subtract(self.constant(0, len(word)), word)

    def multiply(self, left: Word, right: Word) -> Word:
        width = len(left)
        product = self.constant(0, width)
        for shift, bit in enumerate(right):
            if bit == FALSE:
                continue
            partial = [FALSE] * shift + [self.conjunction(bit, a) for a in left[: width - shift]]
            product = self.add(product, partial)
        return product

    def below(self, left: Word, right: Word) -> int:
        """Unsigned ``left < right``: the subtraction borrows."""
        carry = TRUE
        for a, b in zip(left, right, strict=True):
            nb = invert(b)
            half = self.exclusive(a, nb)
            carry = self.disjunction(self.conjunction(a, nb), self.conjunction(half, carry))
        return invert(carry)

    def signed_below(self, left: Word, right: Word) -> int:
        sign_left, sign_right = left[-1], right[-1]
        differ = self.exclusive(sign_left, sign_right)
        return self.choose(differ, sign_left, self.below(left, right))

    def equal(self, left: Word, right: Word) -> int:
        return self.all_of([invert(self.exclusive(a, b)) for a, b in zip(left, right, strict=True)])

    def select(self, condition: int, then: Word, otherwise: Word) -> Word:
        return [self.choose(condition, a, b) for a, b in zip(then, otherwise, strict=True)]

    def unsigned_divide(self, dividend: Word, divisor: Word) -> Word:
        """Restoring division; a zero divisor gives all ones, as Z3's ``bvudiv``."""
        width = len(dividend)
        remainder = self.constant(0, width)
        quotient = [FALSE] * width
        for bit in range(width - 1, -1, -1):
            shifted = [dividend[bit], *remainder[:-1]]
            overflow = remainder[-1]  # the bit shifted out: the shifted remainder is >= 2**width > divisor
            fits = self.disjunction(overflow, invert(self.below(shifted, divisor)))
            quotient[bit] = fits
            remainder = self.select(fits, self.subtract(shifted, divisor), shifted)
        return quotient

    def signed_divide(self, dividend: Word, divisor: Word) -> Word:
        """Z3's ``bvsdiv``: the quotient of the magnitudes, negated where the signs differ."""
        magnitude_left = self.select(dividend[-1], self.negative(dividend), dividend)
        magnitude_right = self.select(divisor[-1], self.negative(divisor), divisor)
        quotient = self.unsigned_divide(magnitude_left, magnitude_right)
        return self.select(self.exclusive(dividend[-1], divisor[-1]), self.negative(quotient), quotient)

    # --------------------------------------------------------------------------------- writer
    def aiger(self, comment: str = "") -> bytes:
        """The circuit in binary AIGER (latches reset to zero), latch ``k`` named ``r<k>`` in its
        symbol table (ABC names the columns of its invariant by them)."""
        variables = self.inputs + len(self.latches) + len(self.gates)
        header = f"aig {variables} {self.inputs} {len(self.latches)} {len(self.outputs)} {len(self.gates)}\n"
        lines = "".join(f"{literal}\n" for literal in self.latches) + "".join(f"{out}\n" for out in self.outputs)
        body = bytearray()
        first = 2 * (self.inputs + len(self.latches) + 1)
        for position, (high, low) in enumerate(self.gates):
            left = first + 2 * position
            body += _number(left - high) + _number(high - low)
        symbols = "".join(f"l{position} r{position}\n" for position in range(len(self.latches)))
        trailer = f"c\n{comment}\n" if comment else ""
        return header.encode() + lines.encode() + bytes(body) + symbols.encode() + trailer.encode()


Leaf = Callable[[z3.ExprRef], "Word | int"]


class Blaster:
    """Bit-blasts Z3 terms into an ``Aig``; ``leaf`` gives each uninterpreted constant's bits."""

    def __init__(self, aig: Aig, width: int, leaf: Leaf) -> None:
        self.aig = aig
        self.width = width
        self.leaf = leaf
        self._done: dict[int, Word | int] = {}
        self._held: list[z3.ExprRef] = []  # every term blasted, kept alive so that no AST id is reused

    def literal(self, term: z3.ExprRef | bool) -> int:
        if isinstance(term, bool):
            return TRUE if term else FALSE
        result = self._blast(term)
        assert isinstance(result, int)
        return result

    def word(self, term: z3.ExprRef | int) -> Word:
        if isinstance(term, int) and not isinstance(term, bool):
            return self.aig.constant(term, self.width)
        assert not isinstance(term, bool)
        result = self._blast(term)
        assert isinstance(result, list)
        return result

    def _blast(self, term: z3.ExprRef) -> Word | int:
        # Iterative post-order walk: terms can be deep (ITE chains over many transitions).
        pending = [term]
        while pending:
            current = pending[-1]
            key = current.get_id()
            if key in self._done:
                pending.pop()
                continue
            missing = [child for child in current.children() if child.get_id() not in self._done]
            if missing and not (z3.is_const(current)):
                pending.extend(missing)
                continue
            pending.pop()
            self._done[key] = self._gate(current)
            self._held.append(current)
        return self._done[term.get_id()]

    def _gate(self, term: z3.ExprRef) -> Word | int:  # noqa: C901 - one branch per operator
        aig = self.aig
        if z3.is_true(term):
            return TRUE
        if z3.is_false(term):
            return FALSE
        if z3.is_bv_value(term):
            return aig.constant(term.as_long(), term.size())
        if z3.is_const(term):
            return self.leaf(term)
        kind = term.decl().kind()
        operands = [self._done[child.get_id()] for child in term.children()]
        literals = [operand for operand in operands if isinstance(operand, int)]
        words = [operand for operand in operands if isinstance(operand, list)]
        if kind == z3.Z3_OP_AND:
            return aig.all_of(literals)
        if kind == z3.Z3_OP_OR:
            return aig.any_of(literals)
        if kind == z3.Z3_OP_NOT:
            return invert(literals[0])
        if kind == z3.Z3_OP_IMPLIES:
            return aig.disjunction(invert(literals[0]), literals[1])
        if kind == z3.Z3_OP_XOR:
            return aig.exclusive(literals[0], literals[1])
        if kind in (z3.Z3_OP_EQ, z3.Z3_OP_IFF, z3.Z3_OP_DISTINCT) and len(operands) == 2:
            left, right = operands
            same = (
                invert(aig.exclusive(left, right))
                if isinstance(left, int) and isinstance(right, int)
                else aig.equal(_as_word(left), _as_word(right))
            )
            return invert(same) if kind == z3.Z3_OP_DISTINCT else same
        if kind == z3.Z3_OP_ITE:
            condition, then, otherwise = operands
            assert isinstance(condition, int)
            if isinstance(then, int) and isinstance(otherwise, int):
                return aig.choose(condition, then, otherwise)
            return aig.select(condition, _as_word(then), _as_word(otherwise))
        if kind == z3.Z3_OP_SLT:
            return aig.signed_below(words[0], words[1])
        if kind == z3.Z3_OP_SGT:
            return aig.signed_below(words[1], words[0])
        if kind == z3.Z3_OP_SLEQ:
            return invert(aig.signed_below(words[1], words[0]))
        if kind == z3.Z3_OP_SGEQ:
            return invert(aig.signed_below(words[0], words[1]))
        if kind == z3.Z3_OP_BADD:
            result = words[0]
            for word in words[1:]:
                result = aig.add(result, word)
            return result
        if kind == z3.Z3_OP_BSUB:
            return aig.subtract(words[0], words[1])
        if kind == z3.Z3_OP_BNEG:
            return aig.negative(words[0])
        if kind == z3.Z3_OP_BMUL:
            result = words[0]
            for word in words[1:]:
                result = aig.multiply(result, word)
            return result
        if kind in (z3.Z3_OP_BSDIV, z3.Z3_OP_BSDIV_I):
            return aig.signed_divide(words[0], words[1])
        raise ValueError(f"the bit-blaster does not know the operator of {term.sexpr()[:80]}")


def _as_word(value: Word | int) -> Word:
    if isinstance(value, int):
        raise ValueError("a Boolean where a bit-vector was expected")
    return value
