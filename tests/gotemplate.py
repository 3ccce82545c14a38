"""A small, faithful evaluator of Go's text/template for the subset Ollama's chat TEMPLATEs use, so that a test can
render the TEMPLATE of an Aura Modelfile for a conversation and compare it with transformers'
``apply_chat_template`` (there is no Go toolchain or Ollama here, and no Python package runs Go templates).

Covered, with Go's semantics: text and ``{{ }}`` actions with the ``{{-`` / ``-}}`` whitespace trimming (all
spaces, tabs and newlines next to them), ``if`` / ``else if`` / ``else`` / ``end``, ``range PIPE`` and
``range $i, $m := PIPE`` (dot is the element), variables (``$x := ...``, ``$x = ...`` assigning the nearest
declared one, ``$`` the data), fields (``.Role``, ``$.System``, ``$m.Content``), string, number and boolean
literals, parentheses, and the builtins ``eq ne and or not len index slice`` (``and``/``or`` return an
argument, short-circuiting, as Go does). Anything else raises, so a template outside the subset cannot pass.
"""

from __future__ import annotations

import re

_ACTION = re.compile(r"\{\{(-[ \t\r\n])?(.*?)([ \t\r\n]-)?\}\}", re.DOTALL)
_SPACE = " \t\r\n"
_TOKEN = re.compile(r'\s*(\(|\)|"(?:[^"\\]|\\.)*"|:=|=|,|[^\s(),]+)')


def _truth(v) -> bool:
    return not (v is None or v is False or v == 0 or v == "" or (hasattr(v, "__len__") and len(v) == 0))


def _parse(template: str) -> list:
    """Nodes: ("text", s) | ("out", expr) | ("set", name, expr, declare) | ("if", [(cond, body)...], else)
    | ("range", vars, expr, body)."""
    flat: list = []
    pos, trim_next = 0, False
    for m in _ACTION.finditer(template):
        text = template[pos : m.start()]
        if trim_next:
            text = text.lstrip(_SPACE)
        if m.group(1):  # "{{- " trims the text before
            text = text.rstrip(_SPACE)
        flat += [("text", text), ("action", m.group(2).strip())]
        trim_next, pos = bool(m.group(3)), m.end()  # " -}}" trims the text after
    text = template[pos:]
    flat.append(("text", text.lstrip(_SPACE) if trim_next else text))
    return _block(iter(flat), top=True)[0]


def _block(it, top=False):
    nodes: list = []
    for kind, value in it:
        if kind == "text":
            if value:
                nodes.append(("text", value))
            continue
        words = value.split(None, 1)
        head = words[0] if words else ""
        if head == "if":
            branches, otherwise = [], None
            cond = _expr(words[1])
            while True:
                body, stop = _block(it)
                if stop == "end":
                    branches.append((cond, body))
                    break
                if stop.startswith("else if "):
                    branches.append((cond, body))
                    cond = _expr(stop[len("else if ") :])
                    continue
                if stop == "else":
                    branches.append((cond, body))
                    otherwise, stop = _block(it)
                    if stop != "end":
                        raise ValueError(f"unexpected {stop!r}")
                    break
                raise ValueError(f"unexpected {stop!r}")
            nodes.append(("if", branches, otherwise))
        elif head == "range":
            m = re.fullmatch(r"(?:(\$\w*)(?:\s*,\s*(\$\w*))?\s*:=\s*)?(.+)", words[1], re.DOTALL)
            names = [n for n in (m.group(1), m.group(2)) if n]
            body, stop = _block(it)
            if stop != "end":
                raise ValueError(f"range closed by {stop!r}")
            nodes.append(("range", names, _expr(m.group(3)), body))
        elif head in ("end", "else") or value.startswith("else if "):
            if top:
                raise ValueError(f"unexpected {value!r}")
            return nodes, value
        elif re.match(r"\$\w*\s*:?=", value):
            name, op, expr = re.match(r"(\$\w*)\s*(:?=)\s*(.+)", value, re.DOTALL).groups()
            nodes.append(("set", name, _expr(expr), op == ":="))
        else:
            nodes.append(("out", _expr(value)))
    if not top:
        raise ValueError("missing {{ end }}")
    return nodes, None


def _expr(text: str):
    tokens = _TOKEN.findall(text)
    expr, i = _pipeline(tokens, 0)
    if i != len(tokens):
        raise ValueError(f"cannot parse {text!r}")
    return expr


def _pipeline(tokens, i):
    args = []
    while i < len(tokens) and tokens[i] != ")":
        if tokens[i] == "(":
            sub, i = _pipeline(tokens, i + 1)
            if i >= len(tokens) or tokens[i] != ")":
                raise ValueError("unbalanced parentheses")
            args.append(sub)
            i += 1
        else:
            args.append(("atom", tokens[i]))
            i += 1
    if not args:
        raise ValueError("empty pipeline")
    return (
        ("call", args[0][1], args[1:])
        if args[0][0] == "atom" and args[0][1] in _FUNCS
        else args[0]
        if len(args) == 1
        else _bad(args)
    ), i


def _bad(args):
    raise ValueError(f"not a function call: {args}")


_FUNCS = {"eq", "ne", "and", "or", "not", "len", "index", "slice"}


class _Scope:
    def __init__(self, data):
        self.frames = [{"$": data}]

    def get(self, name):
        for f in reversed(self.frames):
            if name in f:
                return f[name]
        raise ValueError(f"undefined variable {name}")

    def assign(self, name, value):
        for f in reversed(self.frames):
            if name in f:
                f[name] = value
                return
        raise ValueError(f"assignment to undeclared {name}")


def _field(value, path):
    for part in [p for p in path.split(".") if p]:
        value = value[part] if isinstance(value, dict) else getattr(value, part)
    return value


def _eval(expr, dot, scope):
    if expr[0] == "call":
        name, args = expr[1], expr[2]
        if name == "and":
            v = None
            for a in args:
                v = _eval(a, dot, scope)
                if not _truth(v):
                    return v
            return v
        if name == "or":
            v = None
            for a in args:
                v = _eval(a, dot, scope)
                if _truth(v):
                    return v
            return v
        vals = [_eval(a, dot, scope) for a in args]
        if name == "eq":
            return any(vals[0] == v for v in vals[1:])
        if name == "ne":
            return vals[0] != vals[1]
        if name == "not":
            return not _truth(vals[0])
        if name == "len":
            return len(vals[0])
        if name == "index":
            return vals[0][vals[1]]
        if name == "slice":
            return vals[0][vals[1] : vals[2]] if len(vals) == 3 else vals[0][vals[1] :]
    tok = expr[1]
    if tok.startswith('"'):
        return bytes(tok[1:-1], "utf-8").decode("unicode_escape").encode("latin-1").decode("utf-8")
    if tok in ("true", "false"):
        return tok == "true"
    if re.fullmatch(r"-?\d+", tok):
        return int(tok)
    if tok.startswith("$"):
        name, _, path = tok.partition(".")
        return _field(scope.get(name), path)
    if tok.startswith("."):
        return _field(dot, tok)
    raise ValueError(f"unknown operand {tok!r}")


def _run(nodes, dot, scope, out):
    for node in nodes:
        kind = node[0]
        if kind == "text":
            out.append(node[1])
        elif kind == "out":
            v = _eval(node[1], dot, scope)
            out.append("true" if v is True else "false" if v is False else "" if v is None else str(v))
        elif kind == "set":
            v = _eval(node[2], dot, scope)
            if node[3]:
                scope.frames[-1][node[1]] = v
            else:
                scope.assign(node[1], v)
        elif kind == "if":
            for cond, body in node[1]:
                if _truth(_eval(cond, dot, scope)):
                    scope.frames.append({})
                    _run(body, dot, scope, out)
                    scope.frames.pop()
                    break
            else:
                if node[2] is not None:
                    scope.frames.append({})
                    _run(node[2], dot, scope, out)
                    scope.frames.pop()
        elif kind == "range":
            for i, item in enumerate(_eval(node[2], dot, scope)):
                frame = {}
                if len(node[1]) == 2:
                    frame[node[1][0]], frame[node[1][1]] = i, item
                elif node[1]:
                    frame[node[1][0]] = item
                scope.frames.append(frame)
                _run(node[3], item, scope, out)
                scope.frames.pop()


def render(template: str, data: dict) -> str:
    """``template`` (Go text/template) executed with ``data`` as dot, as Ollama executes a TEMPLATE."""
    out: list[str] = []
    _run(_parse(template), data, _Scope(data), out)
    return "".join(out)
