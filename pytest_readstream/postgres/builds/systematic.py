"""Systematic C mutants of ``read_stream.c``: every mutation operator at every site, from its parse tree.

The named C mutants of :mod:`.traced_copy` are bugs somebody thought of. This module makes the
other kind: one mechanical edit at one place, for every place where an operator applies, so that
the share of them the conformance suite kills is a *score* of the suite against
``src/backend/storage/aio/read_stream.c`` (``readstream mutants --impl postgres --systematic``,
:mod:`.systematic_run`). Sites are found in tree-sitter's C parse tree (:mod:`.cparse`), never by
regular expressions, and only inside function bodies. The operators:

``ROR``  relational operator replacement, the "sufficient" subset of Kaminski, Ammann and
         Offutt (2011), which subsumes all the others: ``<`` by ``<=``, ``!=``, ``false``;
         ``>`` by ``>=``, ``!=``, ``false``; ``<=`` by ``<``, ``==``, ``true``; ``>=`` by ``>``,
         ``==``, ``true``; ``==`` by ``<=``, ``>=``, ``false``; ``!=`` by ``<``, ``>``, ``true``.
``AOR``  arithmetic operator replacement: ``+`` and ``-`` swapped, ``*`` and ``/`` swapped,
         ``%`` by ``/``; the same for the compound assignments ``+=`` ``-=`` ``*=`` ``/=`` ``%=``.
``BOR``  bitwise operator replacement (the stream's flags): ``&`` and ``|`` swapped, also in
         ``&=`` and ``|=``.
``LCR``  logical connector replacement: ``&&`` and ``||`` swapped.
``CRP``  constant replacement: an integer literal ``n`` by ``0``, ``1``, ``n+1`` and ``n-1``
         (those that differ from ``n``, none negative); ``true`` and ``false`` swapped.
``NEG``  negated condition: the condition of an ``if``, ``while``, ``for``, ``do`` or ``?:`` by
         ``!(condition)``.
``SDL``  statement deletion: an expression statement (a call, an assignment, an increment) by
         an empty statement (by ``if (0) statement`` where it calls a buffer-manager function
         the traced copy wraps, see :func:`generate_mutants`).
``INC``  increments: ``++`` and ``--`` swapped (prefix and postfix).

What is not a site: code outside function bodies (declarations, macros), ``Assert`` and its kin
and the ``VALGRIND_*`` client requests, with their arguments (the servers under test are built
without assertions and without Valgrind, where they expand to nothing), and preprocessor
conditions. Code inside ``#ifdef`` blocks that the build
leaves out is a site; the statement coverage of :mod:`.sitecov` finds it never runs ("not reached").

Each mutant has a stable id, ``function:line:column:OPERATOR:original->replacement`` (line and
column of the replaced text, 1-based, in the unmutated file), which names it in caches, in the
reviewed list of equivalent mutants and in reports, and a short :attr:`SystematicMutant.key`
(a hash of the id) for file names.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .cparse import CSource, apply_edits, parse_c

__all__ = [
    "OPERATORS",
    "SystematicMutant",
    "apply_mutant",
    "generate_mutants",
    "statement_nodes",
]

#: Operator name -> what it does (the report's legend).
OPERATORS: dict[str, str] = {
    "ROR": "relational operator replacement",
    "AOR": "arithmetic operator replacement",
    "BOR": "bitwise operator replacement",
    "LCR": "logical connector replacement",
    "CRP": "constant replacement",
    "NEG": "negated condition",
    "SDL": "statement deletion",
    "INC": "increment/decrement swap",
}

_ROR: dict[str, tuple[str, ...]] = {
    "<": ("<=", "!=", "false"),
    ">": (">=", "!=", "false"),
    "<=": ("<", "==", "true"),
    ">=": (">", "==", "true"),
    "==": ("<=", ">=", "false"),
    "!=": ("<", ">", "true"),
}
_AOR: dict[str, tuple[str, ...]] = {
    "+": ("-",),
    "-": ("+",),
    "*": ("/",),
    "/": ("*",),
    "%": ("/",),
    "+=": ("-=",),
    "-=": ("+=",),
    "*=": ("/=",),
    "/=": ("*=",),
    "%=": ("/=",),
}
_BOR: dict[str, tuple[str, ...]] = {"&": ("|",), "|": ("&",), "&=": ("|=",), "|=": ("&=",)}
_LCR: dict[str, tuple[str, ...]] = {"&&": ("||",), "||": ("&&",)}
# Calls that are no code of a build without assertions and Valgrind (they expand to nothing).
_NOT_CODE_CALLS = frozenset(
    {
        "Assert",
        "AssertMacro",
        "AssertArg",
        "AssertState",
        "AssertPointerAlignment",
        "StaticAssertStmt",
        "StaticAssertExpr",
        "StaticAssertDecl",
    }
)
_NOT_CODE_PREFIXES = ("VALGRIND_",)


def _not_code_call(src: CSource, node: Any) -> bool:
    if node.type != "call_expression":
        return False
    fn = node.child_by_field_name("function")
    if fn is None or fn.type != "identifier":
        return False
    name = src.node_text(fn)
    return name in _NOT_CODE_CALLS or name.startswith(_NOT_CODE_PREFIXES)


# Statement kinds the coverage counts; a site belongs to the innermost one around it.
_STATEMENTS = frozenset(
    {
        "expression_statement",
        "return_statement",
        "if_statement",
        "while_statement",
        "for_statement",
        "do_statement",
        "switch_statement",
        "break_statement",
        "continue_statement",
        "goto_statement",
        "declaration",
    }
)
# Nodes whose statement children run in sequence (where a counter can go before each).
_CONTAINERS = frozenset(
    {"compound_statement", "case_statement", "preproc_if", "preproc_ifdef", "preproc_else", "preproc_elif"}
)
_CONDITIONAL = frozenset({"if_statement", "while_statement", "do_statement", "for_statement"})


@dataclass(frozen=True)
class SystematicMutant:
    """One edit at one site of ``read_stream.c``: ``original`` (bytes ``start:end``) by ``replacement``."""

    function: str
    line: int
    column: int
    operator: str
    original: str
    replacement: str
    start: int
    end: int
    #: Byte range of the innermost statement around the site (the coverage unit, :mod:`.sitecov`).
    statement: tuple[int, int]

    @property
    def id(self) -> str:
        """``function:line:column:OPERATOR:original->replacement`` (stable for one file)."""
        return (
            f"{self.function}:{self.line}:{self.column}:{self.operator}:"
            f"{_short(self.original)}->{_short(self.replacement)}"
        )

    @property
    def key(self) -> str:
        """A short hash of :attr:`id`, for file names."""
        return hashlib.sha256(self.id.encode()).hexdigest()[:12]

    def apply(self, text: str) -> str:
        """``text`` (the file the mutant was generated from) with this one edit."""
        return apply_mutant(text, self)


def _short(text: str, limit: int = 48) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def apply_mutant(text: str, mutant: SystematicMutant) -> str:
    """``text`` with ``mutant``'s edit applied (byte offsets of ``text`` encoded as UTF-8)."""
    data = text.encode("utf-8")
    return apply_edits(data, [(mutant.start, mutant.end, mutant.replacement)]).decode("utf-8")


def _int_value(literal: str) -> int | None:
    body = literal.rstrip("uUlL")
    try:
        return int(body, 0)
    except ValueError:
        return int(body, 8) if body.startswith("0") and body.isdigit() else None


def _ancestors(node: Any) -> Iterator[Any]:
    cur = node.parent
    while cur is not None:
        yield cur
        cur = cur.parent


def _is_not_code(src: CSource, node: Any) -> bool:
    """Inside the arguments of ``Assert`` (and kin) or a preprocessor condition."""
    if node.type == "expression_statement" and any(_not_code_call(src, c) for c in node.named_children):
        return True  # deleting an Assert() deletes nothing
    child = node
    for anc in _ancestors(node):
        if _not_code_call(src, anc):
            return True
        if anc.type in ("preproc_if", "preproc_elif") and anc.child_by_field_name("condition") == child:
            return True
        if anc.type == "function_definition":
            return False
        child = anc
    return False


def statement_nodes(src: CSource, body: Any) -> list[Any]:
    """The statements of a function body that the coverage counts, in file order: each statement
    in a block (or ``case``/``#if`` branch), and each unbraced body of ``if``/``else``/loops."""
    out = []
    for n in src._walk(body):
        if n.type not in _STATEMENTS:
            continue
        parent = n.parent
        if parent is None:
            continue
        if (
            parent.type in _CONTAINERS
            or parent.type == "else_clause"
            or (parent.type in _CONDITIONAL and parent.child_by_field_name("body") == n)
            or (parent.type == "if_statement" and parent.child_by_field_name("consequence") == n)
        ):
            out.append(n)
    return sorted(out, key=lambda n: n.start_byte)


def _innermost_statement(node: Any, counted: set[tuple[int, int]]) -> tuple[int, int] | None:
    for anc in [node, *_ancestors(node)]:
        rng = (anc.start_byte, anc.end_byte)
        if anc.type in _STATEMENTS and rng in counted:
            return rng
        if anc.type == "function_definition":
            return None
    return None


def generate_mutants(
    text: str, *, functions: set[str] | None = None, keep_calls: frozenset[str] = frozenset()
) -> list[SystematicMutant]:
    """Every systematic mutant of ``text`` (a C file), in file order (then by operator).

    ``functions`` restricts the sites to those function bodies. Each mutant is one edit; the
    mutated file is C that the parser reads without an error where the original was (the unit
    tests check that for every mutant). A deleted statement that calls one of ``keep_calls``
    becomes ``if (0) statement`` instead of ``;``: the same program once compiled (the call
    never runs), but the call stays in the text for a builder that looks for it (the traced
    copy routes ``StartReadBuffers`` and its kin through wrappers and refuses a file that never
    calls them).
    """
    src = parse_c(text)
    out: list[SystematicMutant] = []
    for fn in src.functions():
        if functions is not None and fn.name not in functions:
            continue
        body = fn.node.child_by_field_name("body")
        if body is None:
            continue
        counted = {(s.start_byte, s.end_byte) for s in statement_nodes(src, body)}
        for node in src._walk(body):
            for op, start, end, original, repl in _sites(src, node, keep_calls):
                if _is_not_code(src, node):
                    continue
                stmt = _innermost_statement(node, counted)
                if stmt is None:
                    continue
                line, col = _line_col(src, start)
                out.append(SystematicMutant(fn.name, line, col, op, original, repl, start, end, stmt))
    out.sort(key=lambda m: (m.start, m.end, m.operator, m.replacement))
    # Two edits that come out the same (the same text at the same place) are one mutant.
    seen: set[tuple[int, int, str]] = set()
    unique = []
    for m in out:
        k = (m.start, m.end, m.replacement)
        if k not in seen:
            seen.add(k)
            unique.append(m)
    return unique


def _line_col(src: CSource, offset: int) -> tuple[int, int]:
    before = src.data[:offset]
    line = before.count(b"\n") + 1
    col = offset - (before.rfind(b"\n") + 1) + 1
    return line, col


def _calls_any(src: CSource, node: Any, names: frozenset[str]) -> bool:
    for n in src._walk(node):
        if n.type == "call_expression":
            fn = n.child_by_field_name("function")
            if fn is not None and src.node_text(fn) in names:
                return True
    return False


def _sites(src: CSource, node: Any, keep_calls: frozenset[str]) -> Iterator[tuple[str, int, int, str, str]]:
    """``(operator, start, end, original, replacement)`` of each mutant at ``node``."""
    t = node.type
    if t in ("binary_expression", "assignment_expression"):
        op_node = node.child_by_field_name("operator")
        if op_node is None:
            return
        op = src.node_text(op_node)
        for table, name in ((_ROR, "ROR"), (_AOR, "AOR"), (_BOR, "BOR"), (_LCR, "LCR")):
            for repl in table.get(op, ()):
                if repl in ("true", "false"):
                    # The whole comparison by a constant.
                    yield name, node.start_byte, node.end_byte, src.node_text(node), repl
                else:
                    yield name, op_node.start_byte, op_node.end_byte, op, repl
    elif t == "number_literal":
        text = src.node_text(node)
        value = _int_value(text)
        if value is None:
            return
        for new in (0, 1, value + 1, value - 1):
            if new != value and new >= 0:
                yield "CRP", node.start_byte, node.end_byte, text, str(new)
    elif t in ("true", "false"):
        yield "CRP", node.start_byte, node.end_byte, t, "false" if t == "true" else "true"
    elif t in _CONDITIONAL or t == "conditional_expression":
        cond = node.child_by_field_name("condition")
        if cond is None:
            return
        text = src.node_text(cond)
        if cond.type == "parenthesized_expression":
            inner = text[1:-1]
            yield "NEG", cond.start_byte, cond.end_byte, text, f"(!({inner}))"
        else:
            yield "NEG", cond.start_byte, cond.end_byte, text, f"!({text})"
    elif t == "expression_statement":
        if node.named_child_count == 0:
            return  # already an empty statement
        text = src.node_text(node)
        repl = f"if (0) {text}" if keep_calls and _calls_any(src, node, keep_calls) else ";"
        yield "SDL", node.start_byte, node.end_byte, text, repl
    elif t == "update_expression":
        op_node = node.child_by_field_name("operator")
        if op_node is None:
            return
        op = src.node_text(op_node)
        if op in ("++", "--"):
            yield "INC", op_node.start_byte, op_node.end_byte, op, "--" if op == "++" else "++"
