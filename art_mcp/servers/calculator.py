"""A stateless MCP server: exact arithmetic and unit conversion."""

# Run as a script, this file imports only the mcp SDK (not art_mcp), so it starts fast.
from __future__ import annotations

import argparse
import ast
import math
import operator
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING or __package__:  # imported, or run with -m (mypy reads this branch)
    from .sdk import Server, ToolError, serve
else:  # run by path (bundled_server): this folder is sys.path[0]
    from sdk import Server, ToolError, serve

server = Server(
    "calculator",
    instructions="Evaluate arithmetic expressions and convert between units.",
    log_level="WARNING",
)

_OPS: dict[type[ast.AST], Callable[..., float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}
_FUNCS: dict[str, Callable[..., float]] = {"sqrt": math.sqrt, "abs": abs, "round": round, "log": math.log, "exp": math.exp}

# factor to the base unit of each dimension
_UNITS: dict[str, tuple[str, float]] = {
    "m": ("length", 1.0),
    "km": ("length", 1000.0),
    "cm": ("length", 0.01),
    "mm": ("length", 0.001),
    "mi": ("length", 1609.344),
    "ft": ("length", 0.3048),
    "in": ("length", 0.0254),
    "yd": ("length", 0.9144),
    "kg": ("mass", 1.0),
    "g": ("mass", 0.001),
    "lb": ("mass", 0.45359237),
    "oz": ("mass", 0.028349523125),
    "l": ("volume", 1.0),
    "ml": ("volume", 0.001),
    "gal": ("volume", 3.785411784),
    "s": ("time", 1.0),
    "min": ("time", 60.0),
    "h": ("time", 3600.0),
    "day": ("time", 86400.0),
}
_TEMPS = {"c", "f", "k"}


def _eval(node: ast.AST) -> float:
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        if isinstance(node.op, ast.Pow) and abs(_eval(node.right)) > 100:
            raise ToolError("exponent too large (limit 100)")
        return _OPS[type(node.op)](_eval(node.left), _eval(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_eval(node.operand))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCS:
        return _FUNCS[node.func.id](*(_eval(a) for a in node.args))
    raise ToolError(
        f"unsupported syntax {ast.unparse(node)!r}; use numbers, + - * / // % **, and {', '.join(_FUNCS)}"
    )


@server.tool()
def calculate(expression: str) -> float:
    """Evaluate an arithmetic expression, e.g. "(3 + 4) * 2" or "sqrt(2) ** 2"."""
    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError:
        raise ToolError(f"cannot parse {expression!r}; write a plain arithmetic expression") from None
    try:
        return float(_eval(tree))
    except ZeroDivisionError:
        raise ToolError("division by zero") from None


def _to_celsius(value: float, unit: str) -> float:
    return {"c": value, "f": (value - 32) * 5 / 9, "k": value - 273.15}[unit]


@server.tool()
def convert_units(value: float, from_unit: str, to_unit: str) -> float:
    """Convert a value between units of length (m km cm mm mi ft in yd), mass (kg g lb oz),
    volume (l ml gal), time (s min h day) or temperature (c f k)."""
    a, b = from_unit.strip().lower(), to_unit.strip().lower()
    if a in _TEMPS and b in _TEMPS:
        c = _to_celsius(value, a)
        return {"c": c, "f": c * 9 / 5 + 32, "k": c + 273.15}[b]
    if a not in _UNITS or b not in _UNITS:
        unknown = a if a not in _UNITS else b
        raise ToolError(f"unknown unit {unknown!r}; known units: {', '.join([*_UNITS, *_TEMPS])}")
    (dim_a, fa), (dim_b, fb) = _UNITS[a], _UNITS[b]
    if dim_a != dim_b:
        raise ToolError(f"cannot convert {dim_a} ({a}) to {dim_b} ({b})")
    return value * fa / fb


def main(argv: list[str] | None = None) -> None:
    """Serve over stdio, or streamable HTTP on 127.0.0.1 with ``--http PORT``."""
    parser = argparse.ArgumentParser(description=server.instructions)
    parser.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP on 127.0.0.1:PORT")
    args = parser.parse_args(argv)
    serve(server, args.http)


if __name__ == "__main__":
    main()
