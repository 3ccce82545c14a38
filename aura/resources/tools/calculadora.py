"""Herramienta de ejemplo para GRPO con herramientas (``aura finetune --objective grpo --tools``): una calculadora.

Evalúa expresiones aritméticas con el árbol sintáctico de Python (``ast``), sin ``eval``: solo números,
``+ - * / // %``, potencias pequeñas y paréntesis. Acepta la coma decimal española ("2,5 * 4").
"""

from __future__ import annotations

import ast
import operator
import re

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
MAX_EXPONENT = 100
MAX_LENGTH = 200


def _value(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _value(node.left), _value(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise ValueError(f"exponente demasiado grande (máximo {MAX_EXPONENT})")
        return _BINARY[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_value(node.operand))
    raise ValueError("solo se admiten números, + - * / // % ** y paréntesis")


def _texto(valor: float) -> str:
    if isinstance(valor, float) and valor.is_integer() and abs(valor) < 1e15:
        valor = int(valor)
    if isinstance(valor, float):
        valor = round(valor, 6)
    return str(valor).replace(".", ",")


def calcular(expresion: str) -> str:
    """Calcula el resultado de una expresión aritmética (con coma decimal, como en español).

    Args:
        expresion: La expresión que se calcula, por ejemplo "(12 + 3) * 4" o "2,5 * 4".
    """
    if len(expresion) > MAX_LENGTH:
        raise ValueError(f"expresión demasiado larga (máximo {MAX_LENGTH} caracteres)")
    python = re.sub(r"(?<=\d),(?=\d)", ".", expresion.replace("×", "*").replace("÷", "/"))
    try:
        tree = ast.parse(python.strip(), mode="eval")
    except SyntaxError:
        raise ValueError(f"expresión no válida: {expresion!r}") from None
    try:
        return _texto(_value(tree.body))
    except ZeroDivisionError:
        raise ValueError("división por cero") from None
