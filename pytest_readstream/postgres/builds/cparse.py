"""A C parser for the harness's builds of PostgreSQL's own code (tree-sitter with its C grammar).

The traced copy of ``read_stream.c`` (:mod:`.traced_copy`) and its C mutants change the server's
own source: they rename functions, route calls through wrappers, read ``struct ReadStream``'s
fields and replace expressions. Regular expressions over C text break on the first comment,
line break or renamed field; a parse tree names what each piece of text is. This module wraps
the parser (``tree-sitter`` and ``tree-sitter-c``, the ``postgres`` extra) and answers the few
questions the builders ask of a C file:

* :meth:`CSource.functions`: the function definitions, with their storage class, so that those
  with external linkage can be renamed;
* :meth:`CSource.identifiers` and :meth:`CSource.calls`: where a name is used in code (never in
  a comment or a string literal, which the grammar keeps apart);
* :meth:`CSource.includes`: the file's ``#include`` lines;
* :meth:`CSource.struct_fields`: the members of a ``struct`` as declared (type, name, pointer
  or array), which is how the copy reads ``struct ReadStream`` of each version;
* :meth:`CSource.prototypes`: function declarations of a header (``storage/bufmgr.h``): return
  type and parameters as declared, from which the wrappers are generated;
* :meth:`CSource.matches`: a tree-sitter query inside one function, the form the C mutants'
  edits take.

Edits are byte ranges of the parsed text (:func:`apply_edits`). Without the parser installed,
:func:`c_parser` raises :class:`CParserUnavailable` with one line saying how to get it; the
callers turn it into one skip or refusal reason.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from ._cbuild import CBuildUnavailable

__all__ = [
    "CField",
    "CFunction",
    "CParam",
    "CParserUnavailable",
    "CPrototype",
    "CSource",
    "apply_edits",
    "c_parser",
    "parse_c",
]

_INSTALL_HINT = "pip install 'pytest-readstream[postgres]' (the tree-sitter and tree-sitter-c wheels)"


class CParserUnavailable(CBuildUnavailable):
    """The C parser (tree-sitter, tree-sitter-c) is not installed; the message says how to get it."""


@functools.lru_cache(maxsize=1)
def _language() -> Any:
    try:
        import tree_sitter
        import tree_sitter_c
    except ImportError as err:
        raise CParserUnavailable(
            f"the traced copy of read_stream.c is made with a C parser that is not installed here "
            f"({err.name or err}): {_INSTALL_HINT}"
        ) from err
    return tree_sitter.Language(tree_sitter_c.language())


def c_parser() -> Any:
    """A ``tree_sitter.Parser`` for C (raises :class:`CParserUnavailable` without the wheels)."""
    import tree_sitter

    lang = _language()
    return tree_sitter.Parser(lang)


def parse_c(text: str) -> CSource:
    """Parse ``text`` (a C file) into a :class:`CSource`."""
    return CSource(text)


@dataclass(frozen=True)
class CFunction:
    """A function definition: its name, storage class words, and where it lies (byte offsets)."""

    name: str
    storage: frozenset[str]  # "static", "extern", "inline" as written
    start: int
    body_start: int
    end: int
    node: Any

    @property
    def external(self) -> bool:
        """Defined with external linkage (neither ``static`` nor a plain ``inline``)."""
        return "static" not in self.storage and not (
            "inline" in self.storage and "extern" not in self.storage
        )


@dataclass(frozen=True)
class CParam:
    """One parameter of a prototype: its type as written (``Buffer *``) and its name (may be empty)."""

    type: str
    name: str


@dataclass(frozen=True)
class CPrototype:
    """A function declaration of a header: ``return_type name(params)``."""

    name: str
    return_type: str
    params: tuple[CParam, ...]

    @property
    def returns_void(self) -> bool:
        return self.return_type == "void"

    def signature(self, name: str | None = None) -> str:
        """``return_type name(type1 name1, ...)`` (``void`` for no parameters)."""
        params = ", ".join(_join_decl(p.type, p.name) for p in self.params) or "void"
        return f"{_join_decl(self.return_type, name or self.name)}({params})"


@dataclass(frozen=True)
class CField:
    """A member of a struct as declared: type words, name, whether it is a pointer or an array."""

    type: str
    name: str
    pointer: bool
    array: bool


def _join_decl(type_text: str, name: str) -> str:
    if not name:
        return type_text
    return f"{type_text}{name}" if type_text.endswith("*") else f"{type_text} {name}"


def _squash(text: str) -> str:
    return " ".join(text.split())


class CSource:
    """A parsed C file (see the module docstring for what can be asked of it)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.data = text.encode("utf-8")
        self.tree = c_parser().parse(self.data)
        self.root = self.tree.root_node

    # -------------------------------------------------------------------------- helpers
    def node_text(self, node: Any) -> str:
        return self.data[node.start_byte : node.end_byte].decode("utf-8")

    def _walk(self, node: Any | None = None) -> Iterator[Any]:
        stack = [node if node is not None else self.root]
        while stack:
            n = stack.pop()
            yield n
            stack.extend(reversed(n.children))

    @property
    def has_errors(self) -> bool:
        return bool(self.root.has_error)

    # -------------------------------------------------------------------------- questions
    def functions(self) -> list[CFunction]:
        """Every function definition (at file level, also inside ``#if`` blocks), in file order."""
        out = []
        for n in self._walk():
            if n.type != "function_definition":
                continue
            name = _declared_name(n.child_by_field_name("declarator"))
            body = n.child_by_field_name("body")
            if name is None or body is None:
                continue
            storage = set()
            for c in n.children:
                if c.type == "storage_class_specifier":
                    storage.add(self.node_text(c))
            out.append(CFunction(name, frozenset(storage), n.start_byte, body.start_byte, n.end_byte, n))
        return out

    def function(self, name: str) -> CFunction | None:
        for f in self.functions():
            if f.name == name:
                return f
        return None

    def identifiers(self, names: Iterable[str]) -> list[Any]:
        """Every ``identifier`` node (a name used or defined in code) whose text is in ``names``."""
        wanted = {n.encode() for n in names}
        return [n for n in self._walk() if n.type == "identifier" and n.text in wanted]

    def calls(self, names: Iterable[str]) -> list[tuple[str, Any]]:
        """``(name, identifier node)`` of every call ``name(...)`` with ``name`` in ``names``."""
        wanted = set(names)
        out = []
        for n in self._walk():
            if n.type != "call_expression":
                continue
            fn = n.child_by_field_name("function")
            if fn is not None and fn.type == "identifier" and self.node_text(fn) in wanted:
                out.append((self.node_text(fn), fn))
        return out

    def includes(self) -> list[Any]:
        """The ``#include`` directives, in file order."""
        return [n for n in self._walk() if n.type == "preproc_include"]

    def struct_fields(self, struct: str) -> list[CField] | None:
        """The members of ``struct <struct> { ... }`` as declared (``None`` when no such definition)."""
        for n in self._walk():
            if n.type != "struct_specifier":
                continue
            name = n.child_by_field_name("name")
            body = n.child_by_field_name("body")
            if name is None or body is None or self.node_text(name) != struct:
                continue
            fields = []
            for decl in body.children:
                if decl.type != "field_declaration":
                    continue
                type_node = decl.child_by_field_name("type")
                if type_node is None:
                    continue
                quals = [self.node_text(c) for c in decl.children if c.type == "type_qualifier"]
                base = _squash(" ".join([*quals, self.node_text(type_node)]))
                for d in decl.children_by_field_name("declarator"):
                    pointer = array = False
                    cur = d
                    while cur is not None and cur.type != "field_identifier":
                        if cur.type == "pointer_declarator":
                            pointer = True
                        elif cur.type == "array_declarator":
                            array = True
                        elif cur.type in ("function_declarator", "parenthesized_declarator"):
                            pointer = True  # a function pointer member
                        cur = cur.child_by_field_name("declarator")
                    if cur is not None:
                        fields.append(CField(base, self.node_text(cur), pointer, array))
            return fields
        return None

    def prototypes(self, names: Iterable[str]) -> dict[str, CPrototype]:
        """The declarations ``extern T name(params);`` of ``names`` found in this file."""
        wanted = set(names)
        out: dict[str, CPrototype] = {}
        for n in self._walk():
            if n.type != "declaration":
                continue
            type_node = n.child_by_field_name("type")
            for d in n.children_by_field_name("declarator"):
                ptr = ""
                cur = d
                while cur is not None and cur.type == "pointer_declarator":
                    ptr += "*"
                    cur = cur.child_by_field_name("declarator")
                if cur is None or cur.type != "function_declarator":
                    continue
                ident = cur.child_by_field_name("declarator")
                if ident is None or ident.type != "identifier" or self.node_text(ident) not in wanted:
                    continue
                quals = [self.node_text(c) for c in n.children if c.type == "type_qualifier"]
                ret = _squash(" ".join([*quals, self.node_text(type_node)])) if type_node else "int"
                if ptr:
                    ret = f"{ret} {ptr}"
                params = []
                plist = cur.child_by_field_name("parameters")
                for p in plist.children if plist is not None else ():
                    if p.type != "parameter_declaration":
                        continue
                    params.append(self._param(p))
                if len(params) == 1 and params[0] == CParam("void", ""):
                    params = []
                out[self.node_text(ident)] = CPrototype(self.node_text(ident), ret, tuple(params))
        return out

    def _param(self, p: Any) -> CParam:
        type_node = p.child_by_field_name("type")
        quals = [self.node_text(c) for c in p.children if c.type == "type_qualifier"]
        base = _squash(" ".join([*quals, self.node_text(type_node)])) if type_node else ""
        d = p.child_by_field_name("declarator")
        stars = ""
        name = ""
        suffix = ""
        cur = d
        while cur is not None:
            if cur.type == "pointer_declarator":
                stars += "*"
            elif cur.type == "array_declarator":
                suffix += "[]"
            elif cur.type == "identifier":
                name = self.node_text(cur)
                break
            cur = cur.child_by_field_name("declarator")
        type_text = f"{base} {stars}" if stars else base
        if suffix:  # an array parameter is a pointer
            type_text = f"{type_text} *" if not stars else f"{type_text}*"
        return CParam(type_text, name)

    def matches(self, pattern: str, *, within: Any | None = None) -> list[dict[str, Any]]:
        """The matches of the tree-sitter query ``pattern`` (inside the node ``within``): one dict
        of capture name -> node per match (a capture matched more than once keeps its first node)."""
        import tree_sitter

        query = tree_sitter.Query(_language(), pattern)
        cursor = tree_sitter.QueryCursor(query)
        node = within if within is not None else self.root
        out = []
        for _index, captures in cursor.matches(node):
            out.append({name: nodes[0] for name, nodes in captures.items() if nodes})
        return out


def _declared_name(declarator: Any | None) -> str | None:
    """The identifier a (possibly pointer) function declarator declares."""
    cur = declarator
    while cur is not None:
        if cur.type == "identifier":
            return str(cur.text.decode())
        cur = cur.child_by_field_name("declarator")
    return None


def apply_edits(data: bytes, edits: Iterable[tuple[int, int, str]]) -> bytes:
    """``data`` with each ``(start, end, new text)`` byte range replaced (ranges must not overlap)."""
    ordered = sorted(edits, key=lambda e: (e[0], e[1]))
    out = []
    pos = 0
    for start, end, new in ordered:
        if start < pos:
            raise ValueError(f"overlapping edits at byte {start}")
        out.append(data[pos:start])
        out.append(new.encode("utf-8"))
        pos = end
    out.append(data[pos:])
    return b"".join(out)
