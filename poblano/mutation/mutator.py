"""Mutants of one Amaranth source file, made with Python's ``ast`` module.

Amaranth code is Python that *builds* hardware, so a mutant is a change to the Python expression
that elaborates into the wrong circuit. Every mutant is a single splice of the original text (the
rest of the file is untouched, so line numbers stay meaningful), and it must compile.

Operators (the name is the mutant's ``operator``):

=========== ===================================================================================
``binop``   ``&`` -> ``|``, ``^``; ``|`` -> ``&``, ``^``; ``^`` -> ``|``, ``&``; ``+`` <-> ``-``;
            ``<<`` <-> ``>>``
``compare`` ``<`` -> ``<=``, ``>=``; ``<=`` -> ``<``, ``>``; ``>`` -> ``>=``, ``<=``;
            ``>=`` -> ``>``, ``<``; ``==`` <-> ``!=``
``unary``   ``~x``, ``-x``, ``not x`` -> ``x``
``const``   an integer literal ``n`` -> ``n + 1`` and ``n - 1`` (not below 0); same notation
``mux``     ``Mux(c, a, b)`` -> ``Mux(c, b, a)``
``eq``      one ``x.eq(y)`` added to a domain (``m.d.<domain> += ...``) is dropped (shown as
            ``(dropped)``; the text put in its place is ``[]`` or ``*()``)
``cond``    ``m.If(c)`` / ``m.Elif(c)`` -> ``m.If(~(c))``
=========== ===================================================================================

What is mutated: the body of every function and method of the file (nested functions included)
except dunder methods (``__init__`` builds the interface, not the circuit) and ``@property``
methods. Never mutated: strings and f-strings, ``raise`` and ``assert`` statements, an ``if`` whose
body starts with ``raise`` (a parameter check), decorators, annotations, default values, and the
keyword arguments in :data:`SKIP_KEYWORDS` (names and flags that do not change the circuit).
"""

import ast
import hashlib
import io
import tokenize
from dataclasses import dataclass

__all__ = ["Mutant", "mutants", "sample", "OPERATORS", "SKIP_KEYWORDS"]

OPERATORS = ("binop", "compare", "unary", "const", "mux", "eq", "cond")

_BINOPS = {
    ast.BitAnd: ("&", ("|", "^")),
    ast.BitOr: ("|", ("&", "^")),
    ast.BitXor: ("^", ("|", "&")),
    ast.Add: ("+", ("-",)),
    ast.Sub: ("-", ("+",)),
    ast.LShift: ("<<", (">>",)),
    ast.RShift: (">>", ("<<",)),
}
_COMPARES = {
    ast.Lt: ("<", ("<=", ">=")),
    ast.LtE: ("<=", ("<", ">")),
    ast.Gt: (">", (">=", "<=")),
    ast.GtE: (">=", (">", "<")),
    ast.Eq: ("==", ("!=",)),
    ast.NotEq: ("!=", ("==",)),
}
_UNARY = {ast.Invert: "~", ast.USub: "-", ast.Not: "not"}

#: Keyword arguments whose values are never mutated: they name things or set flags that do not
#: change the circuit's behaviour.
SKIP_KEYWORDS = frozenset({"name", "src_loc_at", "reset_less", "path", "attrs", "description"})

_CONTEXT_CHARS = 100


@dataclass(frozen=True)
class Mutant:
    """One mutant: replace ``source[start:end]`` with ``replacement``."""

    path: str           #: the file, as given to :func:`mutants`
    function: str       #: qualified name of the enclosing function
    operator: str       #: one of :data:`OPERATORS`
    line: int           #: 1-based line of the change
    start: int          #: character offsets in the original source
    end: int
    replacement: str
    before: str         #: the enclosing expression as written (whitespace collapsed)
    after: str         #: the same expression, mutated

    def apply(self, source):
        """The mutated source."""
        return source[:self.start] + self.replacement + source[self.end:]

    @property
    def description(self):
        return f"{self.before}  ->  {self.after}"

    @property
    def key(self):
        """Stable identity within one version of the file (for the cache)."""
        text = f"{self.operator}|{self.start}|{self.end}|{self.replacement}"
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def where(self):
        return f"{self.path}:{self.line}"


class _Source:
    """Offsets of one source text: AST positions (UTF-8 columns) and tokens to character offsets."""

    def __init__(self, text):
        self.text = text
        self.starts = [0]
        for i, ch in enumerate(text):
            if ch == "\n":
                self.starts.append(i + 1)
        self.tokens = []
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type in (tokenize.OP, tokenize.NAME):
                self.tokens.append((self.offset_chars(*tok.start), self.offset_chars(*tok.end), tok.string))

    def offset_chars(self, line, col):
        return self.starts[line - 1] + col

    def offset(self, line, col_bytes):
        start = self.starts[line - 1]
        end = self.starts[line] if line < len(self.starts) else len(self.text)
        return start + len(self.text[start:end].encode()[:col_bytes].decode())

    def span(self, node):
        return self.offset(node.lineno, node.col_offset), self.offset(node.end_lineno, node.end_col_offset)

    def line_of(self, offset):
        lo, hi = 0, len(self.starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.starts[mid] <= offset:
                lo = mid
            else:
                hi = mid - 1
        return lo + 1

    def token_between(self, symbol, lo, hi):
        for start, end, string in self.tokens:
            if start >= lo and end <= hi and string == symbol:
                return start, end
        return None


def _collapse(text):
    return " ".join(text.split())


def _clip(before, after):
    """Shorten a long before/after pair to a window around the change."""
    if max(len(before), len(after)) <= _CONTEXT_CHARS:
        return before, after
    prefix = 0
    while prefix < min(len(before), len(after)) and before[prefix] == after[prefix]:
        prefix += 1
    suffix = 0
    while (suffix < min(len(before), len(after)) - prefix
           and before[-1 - suffix] == after[-1 - suffix]):
        suffix += 1
    keep = 30
    lo = max(0, prefix - keep)
    head = "…" if lo else ""

    def cut(text):
        hi = len(text) - max(0, suffix - keep)
        return head + text[lo:hi] + ("…" if hi < len(text) else "")

    return cut(before), cut(after)


def _is_domain(target):
    """``m.d.sync``, ``m.d.comb``, ``m.d[domain]``: a target that statements are added to."""
    if isinstance(target, ast.Attribute | ast.Subscript):
        inner = target.value
        return isinstance(inner, ast.Attribute) and inner.attr == "d"
    return False


def _is_eq(node):
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "eq"
            and len(node.args) == 1)


def _is_property(func):
    for dec in func.decorator_list:
        if isinstance(dec, ast.Name) and dec.id in ("property", "cached_property"):
            return True
        if isinstance(dec, ast.Attribute) and dec.attr in ("setter", "getter", "cached_property"):
            return True
    return False


def _targets(body, prefix=""):
    for node in body:
        if isinstance(node, ast.ClassDef):
            yield from _targets(node.body, f"{prefix}{node.name}.")
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            dunder = node.name.startswith("__") and node.name.endswith("__")
            if not dunder and not _is_property(node):
                yield f"{prefix}{node.name}", node


class _Collector:
    def __init__(self, source, path):
        self.src = source
        self.path = path
        self.found = []

    # -- recording ---------------------------------------------------------------------------
    def add(self, operator, function, context, start, end, replacement):
        text = self.src.text
        c0, c1 = self.src.span(context)
        if not (c0 <= start <= end <= c1):
            c0, c1 = min(c0, start), max(c1, end)
        before = text[c0:c1]
        after = text[c0:start] + replacement + text[end:c1]
        before, after = _clip(_collapse(before), _collapse(after))
        if operator == "eq":
            after = "(dropped)"
        self.found.append(Mutant(self.path, function, operator, self.src.line_of(start), start, end,
                                 replacement, before, after))

    # -- walking -----------------------------------------------------------------------------
    def function(self, qualname, func):
        for stmt in func.body:
            self.walk(stmt, qualname, None)

    def walk(self, node, where, context):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for stmt in node.body:
                self.walk(stmt, f"{where}.{node.name}", None)
            return
        if isinstance(node, ast.Lambda):
            self.walk(node.body, where, None)
            return
        if isinstance(node, ast.Raise | ast.Assert | ast.ClassDef | ast.Import | ast.ImportFrom
                      | ast.Global | ast.Nonlocal | ast.JoinedStr):
            return
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            return                                                   # docstring or bare literal
        if isinstance(node, ast.If) and node.body and isinstance(node.body[0], ast.Raise):
            for stmt in node.orelse:                                 # a parameter check
                self.walk(stmt, where, None)
            return
        if isinstance(node, ast.AnnAssign):
            if node.value is not None:
                self.walk(node.value, where, None)
            return
        if isinstance(node, ast.expr) and not isinstance(node, ast.Slice | ast.Starred | ast.Tuple):
            if context is None or not isinstance(node, ast.Constant):
                context = node
        handler = getattr(self, f"on_{type(node).__name__}", None)
        if handler is not None:
            handler(node, where, context)
        if isinstance(node, ast.Call):
            self.walk(node.func, where, context)
            for arg in node.args:
                self.walk(arg, where, context)
            for kw in node.keywords:
                if kw.arg not in SKIP_KEYWORDS:
                    self.walk(kw.value, where, context)
            return
        for child in ast.iter_child_nodes(node):
            if isinstance(node, ast.stmt):
                # A constant directly in a simple statement (``size = 1``) is shown with it.
                simple = not isinstance(node, ast.If | ast.For | ast.While | ast.With | ast.Try)
                self.walk(child, where, node if simple else None)
            else:
                self.walk(child, where, context)

    # -- operators -----------------------------------------------------------------------------
    def on_BinOp(self, node, where, context):
        entry = _BINOPS.get(type(node.op))
        if entry is None:
            return
        symbol, replacements = entry
        tok = self.src.token_between(symbol, self.src.span(node.left)[1], self.src.span(node.right)[0])
        if tok is None:
            return
        for new in replacements:
            self.add("binop", where, node, tok[0], tok[1], new)

    def on_Compare(self, node, where, context):
        left = node.left
        for op, right in zip(node.ops, node.comparators, strict=True):
            entry = _COMPARES.get(type(op))
            if entry is not None:
                symbol, replacements = entry
                tok = self.src.token_between(symbol, self.src.span(left)[1], self.src.span(right)[0])
                if tok is not None:
                    for new in replacements:
                        self.add("compare", where, node, tok[0], tok[1], new)
            left = right

    def on_UnaryOp(self, node, where, context):
        symbol = _UNARY.get(type(node.op))
        if symbol is None:
            return
        start = self.src.span(node)[0]
        tok = self.src.token_between(symbol, start, self.src.span(node.operand)[0])
        if tok is not None and tok[0] == start:
            end = tok[1]
            if symbol == "not" and self.src.text[end:end + 1] == " ":
                end += 1
            self.add("unary", where, node, tok[0], end, "")

    def on_Constant(self, node, where, context):
        value = node.value
        if isinstance(value, bool) or not isinstance(value, int):
            return
        start, end = self.src.span(node)
        written = self.src.text[start:end].lower()
        for new in (value + 1, value - 1):
            if new < 0:
                continue
            if written.startswith("0x"):
                text = "0x" + format(new, "X" if written != self.src.text[start:end] else "x")
            elif written.startswith("0b"):
                text = "0b" + format(new, "b")
            elif written.startswith("0o"):
                text = "0o" + format(new, "o")
            else:
                text = str(new)
            self.add("const", where, context or node, start, end, text)

    def on_Call(self, node, where, context):
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        if (name == "Mux" and len(node.args) == 3 and not node.keywords
                and not any(isinstance(a, ast.Starred) for a in node.args)):
            (a0, a1), (b0, b1) = self.src.span(node.args[1]), self.src.span(node.args[2])
            text = self.src.text
            if text[a0:a1] != text[b0:b1]:
                self.add("mux", where, node, a0, b1, text[b0:b1] + text[a1:b0] + text[a0:a1])
        if (isinstance(func, ast.Attribute) and func.attr in ("If", "Elif") and len(node.args) == 1
                and not node.keywords and not isinstance(node.args[0], ast.Starred)):
            a0, a1 = self.src.span(node.args[0])
            self.add("cond", where, node, a0, a1, f"~({self.src.text[a0:a1]})")

    def on_AugAssign(self, node, where, context):
        if not (isinstance(node.op, ast.Add) and _is_domain(node.target)):
            return
        value = node.value
        if _is_eq(value):
            start, end = self.src.span(value)
            self.add("eq", where, value, start, end, "[]")
        elif isinstance(value, ast.List | ast.Tuple):
            for elt in value.elts:
                if _is_eq(elt):
                    start, end = self.src.span(elt)
                    self.add("eq", where, elt, start, end, "*()")


def mutants(source, path="<string>"):
    """Every mutant of ``source`` (the text of one Python file), in source order.

    Mutants that do not compile, or that give the same text as an earlier mutant, are left out.
    """
    tree = ast.parse(source, filename=path)
    collector = _Collector(_Source(source), path)
    for qualname, func in _targets(tree.body):
        collector.function(qualname, func)
    out, seen = [], {source}
    for m in sorted(collector.found, key=lambda m: (m.start, m.end, OPERATORS.index(m.operator),
                                                     m.replacement)):
        text = m.apply(source)
        if text in seen:
            continue
        try:
            compile(text, path, "exec", dont_inherit=True)
        except SyntaxError:
            continue
        seen.add(text)
        out.append(m)
    return out


def sample(found, limit):
    """At most ``limit`` of ``found``, evenly spread over the file (all of them for ``None``)."""
    if limit is None or limit >= len(found):
        return list(found)
    return [found[i * len(found) // limit] for i in range(limit)]
