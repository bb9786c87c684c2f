"""An exact, bounded arithmetic tool: ``calculate("1,200 * 0.15")`` -> ``{"value": "180"}``.

The expression is parsed with ``ast.parse(mode="eval")`` and walked node by node over
``fractions.Fraction``; nothing is ever evaluated, executed or compiled as code, so only
the grammar below can run:

- numbers: ints, decimals, exponents (``1e3``), underscores (``1_000``); a literal is read
  from its source text, so ``0.1`` is exactly one tenth and ``0.1 + 0.2`` is ``0.3``;
- ``+ - * /``, unary ``+``/``-``, parentheses, ``**`` with an integer exponent, |e| <= 64;
- ``abs(x)``, ``round(x)`` / ``round(x, n)`` (half away from zero, |n| <= 20),
  ``min(...)``, ``max(...)``.

Thousands commas (``1,200``) are read as such only when the expression calls no function
(a comma inside an argument list always separates arguments: write ``max(1200, 5)`` or
``1_200``) and each group after the first has exactly three digits; ``1,20`` is an error.

Bounds: 500 characters, nesting depth 40, every intermediate |value| < 1e100 with at most
400 digits in its numerator and denominator.
"""

from __future__ import annotations

import ast
import re
from decimal import Context, Decimal
from fractions import Fraction
from typing import Any

from memstrata.errors import MemstrataError

MAX_CHARS = 500
MAX_DEPTH = 40
MAX_EXPONENT = 64
MAX_ABS = Fraction(10) ** 100
MAX_DIGITS = 400
MAX_ROUND_DIGITS = 20
SIGNIFICANT = 10

_MAX_BITS = int(MAX_DIGITS * 3.3219280948873626) + 1  # at least 400 decimal digits, in bits
_CALL = re.compile(r"[A-Za-z_]\w*\s*\(")
_THOUSANDS = re.compile(r"(?<![\w.,])(\d{1,3}(?:,\d{3})+)(?![\w,]|\.\d*,)")
_BINOPS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow)
_SYMBOLS = {ast.Mod: "%", ast.FloorDiv: "//", ast.MatMult: "@", ast.BitXor: "^",
            ast.BitOr: "|", ast.BitAnd: "&", ast.LShift: "<<", ast.RShift: ">>"}
_FUNCTIONS = ("abs", "round", "min", "max")


class CalculatorError(MemstrataError, ValueError):
    """An expression the calculator refuses; the message says what is wrong."""


def _strip_thousands(expression: str) -> str:
    if _CALL.search(expression):
        return expression
    return _THOUSANDS.sub(lambda m: m.group(1).replace(",", ""), expression)


def _check(value: Fraction) -> Fraction:
    if abs(value) >= MAX_ABS:
        raise CalculatorError("result too large: every value must stay below 1e100 in size")
    for part in (value.numerator, value.denominator):
        bits = part.bit_length()
        # Bits bound the digit count closely; count digits only near the limit.
        if bits > _MAX_BITS or (bits > _MAX_BITS - 4 and len(str(abs(part))) > MAX_DIGITS):
            raise CalculatorError(f"result too precise: more than {MAX_DIGITS} digits")
    return value


def _literal(node: ast.Constant, source: str) -> Fraction:
    value = node.value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise CalculatorError(f"only numbers are allowed, not {type(value).__name__} literals")
    if isinstance(value, int):
        return _check(Fraction(value))
    # The source text, not the float, so that 0.1 stays exactly one tenth.
    text = (ast.get_source_segment(source, node) or repr(value)).replace("_", "")
    try:
        decimal = Decimal(text)
    except ArithmeticError as exc:
        raise CalculatorError(f"unreadable number {text[:40]!r}") from exc
    # Decide on the exponent before building the integer: 1e99999999 would take minutes.
    if not decimal.is_finite() or (decimal and decimal.adjusted() >= 100):
        raise CalculatorError("result too large: every value must stay below 1e100 in size")
    _, digits, exponent = decimal.as_tuple()
    # The reduced denominator has at least -exponent - len(digits) digits.
    if decimal and -int(exponent) - len(digits) > MAX_DIGITS:
        raise CalculatorError(f"result too precise: more than {MAX_DIGITS} digits")
    return _check(Fraction(decimal))


def _power(base: Fraction, exponent: Fraction) -> Fraction:
    if exponent.denominator != 1:
        raise CalculatorError("the exponent of ** must be an integer")
    e = exponent.numerator
    if abs(e) > MAX_EXPONENT:
        raise CalculatorError(f"the exponent of ** must be between -{MAX_EXPONENT} and "
                              f"{MAX_EXPONENT}")
    if base == 0 and e < 0:
        raise CalculatorError("division by zero (0 to a negative power)")
    # Refuse before computing: the size of the result is known from the operands.
    bits = max(base.numerator.bit_length(), base.denominator.bit_length()) * abs(e)
    if bits > _MAX_BITS + 64:
        raise CalculatorError("result too large: every value must stay below 1e100 in size")
    return base**e


def _round(value: Fraction, digits: int) -> Fraction:
    scale = Fraction(10) ** digits
    scaled = abs(value) * scale
    whole = int(scaled + Fraction(1, 2))  # half away from zero
    return (whole if value >= 0 else -whole) / scale


def _call(name: str, args: list[Fraction]) -> Fraction:
    if name == "abs":
        if len(args) != 1:
            raise CalculatorError("abs takes exactly one argument")
        return abs(args[0])
    if name == "round":
        if len(args) not in (1, 2):
            raise CalculatorError("round takes one or two arguments: round(x) or round(x, n)")
        digits = args[1] if len(args) == 2 else Fraction(0)
        if digits.denominator != 1 or abs(digits) > MAX_ROUND_DIGITS:
            raise CalculatorError(f"round's n must be an integer between -{MAX_ROUND_DIGITS} "
                                  f"and {MAX_ROUND_DIGITS}")
        return _round(args[0], digits.numerator)
    if not args:
        raise CalculatorError(f"{name} needs at least one argument")
    return min(args) if name == "min" else max(args)


def _walk(node: ast.AST, source: str, depth: int) -> Fraction:
    if depth > MAX_DEPTH:
        raise CalculatorError(f"expression nested too deeply (more than {MAX_DEPTH} levels)")
    if isinstance(node, ast.Constant):
        return _literal(node, source)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.UAdd | ast.USub):
        value = _walk(node.operand, source, depth + 1)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp):
        if not isinstance(node.op, _BINOPS):
            symbol = _SYMBOLS.get(type(node.op), type(node.op).__name__)
            hint = " (** is the power)" if symbol == "^" else ""
            raise CalculatorError(f"operator {symbol} is not supported; use + - * / **{hint}")
        left = _walk(node.left, source, depth + 1)
        right = _walk(node.right, source, depth + 1)
        if isinstance(node.op, ast.Add):
            return _check(left + right)
        if isinstance(node.op, ast.Sub):
            return _check(left - right)
        if isinstance(node.op, ast.Mult):
            return _check(left * right)
        if isinstance(node.op, ast.Div):
            if right == 0:
                raise CalculatorError("division by zero")
            return _check(left / right)
        return _check(_power(left, right))
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name):
            raise CalculatorError(f"only {', '.join(_FUNCTIONS)} can be called")
        if node.func.id not in _FUNCTIONS:
            raise CalculatorError(f"unknown function {node.func.id[:40]!r}; only "
                                  f"{', '.join(_FUNCTIONS)} are allowed")
        if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
            raise CalculatorError("functions take plain positional arguments only")
        args = [_walk(a, source, depth + 1) for a in node.args]
        return _check(_call(node.func.id, args))
    if isinstance(node, ast.Name):
        raise CalculatorError(f"unknown name {node.id[:40]!r}: only numbers and "
                              f"{', '.join(_FUNCTIONS)}(...) are allowed")
    if isinstance(node, ast.Tuple) and node.elts:
        raise CalculatorError("a comma outside a function call: thousands separators need "
                              "groups of three digits and no function call (or write 1_200)")
    raise CalculatorError(f"{type(node).__name__} is not allowed in an arithmetic expression")


def evaluate(expression: str) -> Fraction:
    """Evaluate an arithmetic expression exactly.

    Args:
        expression: at most 500 characters of the grammar in the module docstring.

    Returns:
        The exact value as a ``Fraction``.

    Raises:
        CalculatorError: for anything outside the grammar or over a bound; the message
            says which.
    """
    if not isinstance(expression, str):
        raise CalculatorError("the expression must be a string")
    if len(expression) > MAX_CHARS:
        raise CalculatorError(f"expression too long: {len(expression)} characters, at most "
                              f"{MAX_CHARS}")
    source = _strip_thousands(expression.strip())
    if not source:
        raise CalculatorError("empty expression")
    try:
        tree = ast.parse(source, mode="eval")
    except SyntaxError as exc:
        raise CalculatorError(f"not a valid expression: {exc.msg}") from exc
    except (ValueError, RecursionError, MemoryError) as exc:
        raise CalculatorError("not a valid expression") from exc
    try:
        return _walk(tree.body, source, 0)
    except RecursionError as exc:
        raise CalculatorError("expression nested too deeply") from exc


def format_value(value: Fraction) -> str:
    """An integer's digits, else a decimal of at most 10 significant digits
    (scientific notation below 1e-6 or from 1e15 in size)."""
    if value.denominator == 1:
        return str(value.numerator)
    context = Context(prec=SIGNIFICANT)
    decimal = context.divide(Decimal(value.numerator), Decimal(value.denominator))
    if Decimal("1e-6") <= abs(decimal) < Decimal("1e15"):
        text = format(decimal, "f")
        return text.rstrip("0").rstrip(".") if "." in text else text
    return format(decimal.normalize(context), "e")


def calculate(expression: str) -> dict[str, Any]:
    """The tool: evaluate ``expression`` exactly, never raising.

    Args:
        expression: arithmetic such as ``"(12.5 - 3) * 4"``, ``"1,200 / 7"``,
            ``"round(2/3, 2)"``; ``+ - * / **``, ``abs``, ``round``, ``min``, ``max``.

    Returns:
        ``{"expression", "value"}`` (``value`` a string: an integer, or a decimal with up
        to 10 significant digits plus the exact ``"fraction"`` such as ``"1/3"``), or
        ``{"expression", "error"}``. The echoed expression is cut to 500 characters.
    """
    shown = expression[:MAX_CHARS] if isinstance(expression, str) else repr(expression)[:80]
    try:
        value = evaluate(expression)
    except CalculatorError as exc:
        return {"expression": shown, "error": str(exc)}
    except Exception as exc:  # a last guard: a tool answers with an error, never raises
        return {"expression": shown, "error": f"could not evaluate: {type(exc).__name__}"}
    result: dict[str, Any] = {"expression": shown, "value": format_value(value)}
    if value.denominator != 1:
        result["fraction"] = f"{value.numerator}/{value.denominator}"
    return result
