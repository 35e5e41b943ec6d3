"""Dataflow pictures of effir functions (`effir.visualize`, `effir graph`), as SVG written here.

``visualize(module_or_function)`` draws each function as a box of boxes: its
parameters, one box per operation (named by its ``let`` binding where it has
one), ``if``/``match`` branches and closures (loop bodies of ``cf.foreach``
and ``cf.while_loop`` among them) as nested clusters, and the global state
cells the function reads (a box at the top) and writes (a box at the
bottom), with their edges and the operations that touch them highlighted.

The picture is laid out here, not by Graphviz: the ``graphviz`` package needs
the ``dot`` program, which ``pip`` cannot install, and a dataflow graph in
A-normal form is already ordered, so a layered layout (each box one layer
below the latest box it depends on, clusters laid out inside out) is simple
and needs nothing but the standard library. Recursion over nested clusters
and expressions is an ``ExprFunctor`` on the trampoline (no recursion limit);
the layout costs the program's size plus, for each edge, the nesting depth
it crosses.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any

from .ir import IRModule
from .ir.block import Block
from .ir.expr import (
    Call,
    Constant,
    Constructor,
    Expr,
    Function,
    GlobalVar,
    If,
    Let,
    Match,
    Op,
    PatternConstructor,
    PatternTuple,
    PatternVar,
    RefCreate,
    RefRead,
    RefWrite,
    Tuple,
    TupleGetItem,
    Var,
)
from .ir.expr_functor import ExprFunctor
from .ir.functor import on
from .ir.op import lookup_op
from .ir.printer import astext
from .ops.control import LOOP_OPS

# Geometry (pixels) and colours.
CHAR_W, LINE_H, PAD, GAP_X, GAP_Y, TITLE_H = 7.2, 22, 10, 14, 26, 20
MAX_LABEL = 40
COLOURS = {
    "param": "#e3f2fd",
    "op": "#ffffff",
    "call": "#f1f8e9",
    "const": "#fafafa",
    "result": "#eceff1",
    "state": "#ffe0b2",  # an operation that reads or writes a state cell
    "cell": "#ffcc80",
}
CLUSTER_COLOURS = {
    "function": "#f7f7f7",
    "closure": "#f3f3f3",
    "loop": "#e8f5e9",
    "if": "#e3f2fd",
    "branch": "#f5faff",
    "match": "#f3e5f5",
    "module": "#ffffff",
}
EDGE_COLOURS = {"data": "#607d8b", "read": "#ef6c00", "write": "#c62828"}


@dataclass(eq=False)
class Box:
    """A node (an operation, parameter, result or cell) or a cluster of them."""

    label: str
    kind: str
    title: str = ""
    parent: Box | None = None
    children: list[Box] = field(default_factory=list)
    cluster: bool = False
    last: bool = False  # placed in the cluster's last layer (results, written cells)
    depth: int = 0
    w: float = 0.0
    h: float = 0.0
    x: float = 0.0
    y: float = 0.0

    def add(self, child: Box) -> Box:
        child.parent = self
        child.depth = self.depth + 1
        self.children.append(child)
        return child


def _short(text: str, limit: int = MAX_LABEL) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _text(node) -> str:
    try:
        return astext(node)
    except Exception:  # a picture of a malformed node still draws
        return type(node).__name__


class _Builder(ExprFunctor):
    """Turns one function into boxes and edges: an ``ExprFunctor`` whose
    hooks ``(expr, cluster, name)`` give the box holding an expression's
    value (a new box, or a variable's)."""

    def __init__(self, module: IRModule | None) -> None:
        super().__init__()
        self.cells = set(module.cells) if module is not None else set()
        self.edges: list[tuple[Box, Box, str]] = []
        self.env: dict[Var, Box] = {}
        self.cell_in: dict[str, Box] = {}
        self.cell_out: dict[str, Box] = {}
        self.root: Box | None = None

    def function(self, name: str, fn: Function, parent: Box) -> Box:
        root = parent.add(Box(f"@{name}", "function", cluster=True, title=f"def @{name}"))
        self.root, self.cell_in, self.cell_out = root, {}, {}
        self.drive(self._function_body(fn, root))
        return root

    def _cell(self, name: str, write: bool) -> Box:
        table = self.cell_out if write else self.cell_in
        if name not in table:
            label = f"@{name} (new)" if write else f"@{name}"
            table[name] = self.root.add(
                Box(label, "cell", title=f"global state cell @{name}", last=write)
            )
        return table[name]

    def _edge(self, src: Box | None, dst: Box, kind: str = "data") -> None:
        if src is not None:
            self.edges.append((src, dst, kind))

    def _function_body(self, fn: Function, cluster: Box):
        for param in fn.params:
            ty = f": {_text(param.type_annotation)}" if param.type_annotation is not None else ""
            self.env[param] = cluster.add(
                Box(f"%{param.name_hint}", "param", title=f"%{param.name_hint}{ty}")
            )
        value = yield self._region(fn.body, cluster)
        result = cluster.add(Box("result", "result", last=True))
        self._edge(value, result)

    def _region(self, expr: Expr, cluster: Box):
        """Bind the ``let`` chain of ``expr`` inside ``cluster``; the box of its value."""
        block = Block.of(expr)
        for let in block.lets:
            name = f"%{let.var.name_hint}"
            if isinstance(let.value, Function):  # a closure: a cluster named by its binding
                box = self._closure_box(name, let.value, cluster)
                self.env[let.var] = box  # in scope in its own body (recursion)
                yield self._function_body(let.value, box)
            else:
                box = yield self._value(let.value, cluster, name)
                if box is None or box.parent is not cluster or box.kind == "param":
                    alias = cluster.add(
                        Box(name, "op", title=f"{name} = {_short(_text(let.value), 200)}")
                    )
                    self._edge(box, alias)
                    box = alias
                self.env[let.var] = box
        return (yield self._value(block.tail, cluster, None))

    def _closure_box(self, name: str | None, fn: Function, cluster: Box) -> Box:
        params = ", ".join(f"%{p.name_hint}" for p in fn.params)
        label = f"{name} = fn({params})" if name else f"fn({params})"
        return cluster.add(Box(label, "closure", cluster=True, title=label))

    def _value(self, expr: Expr, cluster: Box, name: str | None) -> Any:
        """The box holding ``expr``'s value, or a computation of it."""
        return self.eval(expr, cluster, name)

    @on(Var)
    def _var(self, expr: Var, cluster: Box, name: str | None) -> Box | None:
        return self.env.get(expr)

    @on(GlobalVar)
    def _global(self, expr: GlobalVar, cluster: Box, name: str | None) -> Box:
        if expr.name in self.cells:
            return self._cell(expr.name, write=False)
        prefix = f"{name} = " if name else ""
        return cluster.add(Box(f"{prefix}@{expr.name}", "const"))

    @on(Constant, Op, Constructor)
    def _const(self, expr: Expr, cluster: Box, name: str | None) -> Box:
        prefix = f"{name} = " if name else ""
        text = _short(_text(expr))
        return cluster.add(Box(prefix + text, "const", title=_text(expr)[:500]))

    @on(Function)
    def _closure(self, expr: Function, cluster: Box, name: str | None):
        box = self._closure_box(name, expr, cluster)
        yield self._function_body(expr, box)
        return box

    @on(Let)
    def _let(self, expr: Let, cluster: Box, name: str | None):
        prefix = f"{name} = " if name else ""
        inner = cluster.add(Box(f"{prefix}let", "closure", cluster=True))
        value = yield self._region(expr, inner)
        out = inner.add(Box("result", "result", last=True))
        self._edge(value, out)
        return inner

    @on(If)
    def _if(self, expr: If, cluster: Box, name: str | None):
        prefix = f"{name} = " if name else ""
        cond = yield self._value(expr.cond, cluster, None)
        box = cluster.add(Box(f"{prefix}if", "if", cluster=True, title=f"{prefix}if"))
        self._edge(cond, box)
        for label, branch in (("then", expr.then_branch), ("else", expr.else_branch)):
            arm = box.add(Box(label, "branch", cluster=True))
            value = yield self._region(branch, arm)
            self._edge(value, arm.add(Box("result", "result", last=True)))
        return box

    @on(Match)
    def _match(self, expr: Match, cluster: Box, name: str | None):
        prefix = f"{name} = " if name else ""
        data = yield self._value(expr.data, cluster, None)
        box = cluster.add(Box(f"{prefix}match", "match", cluster=True, title=f"{prefix}match"))
        self._edge(data, box)
        for clause in expr.clauses:
            arm = box.add(Box(_short(_pattern_text(clause.pattern)), "branch", cluster=True))
            for var in _pattern_vars(clause.pattern):
                self.env[var] = arm.add(Box(f"%{var.name_hint}", "param"))
            value = yield self._region(clause.body, arm)
            self._edge(value, arm.add(Box("result", "result", last=True)))
        return box

    @on(Expr)
    def _operation(self, expr: Expr, cluster: Box, name: str | None):
        """Operations: one box, with an edge from each operand."""
        prefix = f"{name} = " if name else ""
        operands: list[Expr]
        reads: list[str] = []
        writes: list[str] = []
        consts: list[str] = []
        title = prefix + _short(_text(expr), 300)
        if isinstance(expr, Call):
            operands = list(expr.args)
            callee = expr.callee
            if isinstance(callee, Op):
                label = callee.name
                definition = lookup_op(callee.name)
                touches = definition is not None and definition.effect in ("state", "random")
                cell_args = [
                    a.name for a in expr.args if isinstance(a, GlobalVar) and a.name in self.cells
                ]
                if touches:
                    reads += cell_args
                    writes += cell_args
                operands = [
                    a for a in operands if not (isinstance(a, GlobalVar) and a.name in self.cells)
                ]
            elif isinstance(callee, GlobalVar):
                label = f"@{callee.name}"
            elif isinstance(callee, Constructor):
                label = callee.name
            else:  # a closure: named by its variable where it has one
                label = f"call %{callee.name_hint}" if isinstance(callee, Var) else "call"
                operands.insert(0, callee)
        elif isinstance(expr, Tuple):
            label, operands = "tuple", list(expr.fields)
        elif isinstance(expr, TupleGetItem):
            label, operands = f".{expr.index}", [expr.tuple_value]
        elif isinstance(expr, RefCreate):
            label, operands = "ref", [expr.value]
        elif isinstance(expr, RefRead):
            label, operands = "ref_read", [expr.ref]
            if isinstance(expr.ref, GlobalVar) and expr.ref.name in self.cells:
                reads.append(expr.ref.name)
                operands = []
        elif isinstance(expr, RefWrite):
            label, operands = "ref_write", [expr.ref, expr.value]
            if isinstance(expr.ref, GlobalVar) and expr.ref.name in self.cells:
                writes.append(expr.ref.name)
                operands = [expr.value]
        else:
            label, operands = type(expr).__name__, []
        sources: list[Box | None] = []
        for operand in operands:
            if isinstance(operand, Constant):
                consts.append(_short(_text(operand), 12))
                continue
            source = yield self._value(operand, cluster, None)
            sources.append(source)
        if consts:
            label += " " + ", ".join(consts)
        kind = "state" if reads or writes else ("call" if label.startswith("@") else "op")
        box = cluster.add(Box(_short(prefix + label), kind, title=title))
        for source in sources:
            self._edge(source, box)
        if isinstance(expr, Call) and isinstance(expr.callee, Op) and expr.callee.name in LOOP_OPS:
            for source in sources:  # a closure, let-bound or literal: the loop body
                if source is not None and source.kind == "closure":
                    source.kind = "loop"
                    source.label = _short(f"{source.label}  [{expr.callee.name} body]", 60)
                    source.title = source.label
        for cell in reads:
            self._edge(self._cell(cell, write=False), box, "read")
        for cell in writes:
            self._edge(box, self._cell(cell, write=True), "write")
        return box


def _pattern_text(pattern) -> str:
    if isinstance(pattern, PatternConstructor):
        inner = ", ".join(_pattern_text(p) for p in pattern.patterns)
        return (
            f"{pattern.constructor.name}({inner})" if pattern.patterns else pattern.constructor.name
        )
    if isinstance(pattern, PatternTuple):
        return "(" + ", ".join(_pattern_text(p) for p in pattern.patterns) + ")"
    if isinstance(pattern, PatternVar):
        return f"%{pattern.var.name_hint}"
    return "_"


def _pattern_vars(pattern) -> list[Var]:
    out: list[Var] = []
    stack = [pattern]
    while stack:
        p = stack.pop()
        if isinstance(p, PatternVar):
            out.append(p.var)
        elif isinstance(p, PatternConstructor | PatternTuple):
            stack.extend(reversed(p.patterns))
    return out


# -- layout -----------------------------------------------------------------


def _layout(root: Box, edges: list[tuple[Box, Box, str]]) -> None:
    """Sizes inside out, then positions outside in."""
    # For each edge, the two children of the clusters' lowest common ancestor
    # that hold its ends: the dependency that orders that cluster's layers.
    depends: dict[int, list[tuple[Box, Box]]] = {}
    for src, dst, _ in edges:
        pair = _sides(src, dst)
        if pair is not None:
            depends.setdefault(id(pair[0].parent), []).append(pair)
    order: list[Box] = []  # clusters, parents before children
    stack = [root]
    while stack:
        box = stack.pop()
        if box.cluster:
            order.append(box)
            stack.extend(box.children)
    layers_of: dict[int, list[list[Box]]] = {}
    for box in reversed(order):  # children before parents
        _size_leaves(box)
        layers = _layers(box, depends.get(id(box), []))
        layers_of[id(box)] = layers
        width = max(
            (sum(c.w for c in layer) + GAP_X * (len(layer) - 1) for layer in layers), default=0
        )
        height = sum(max(c.h for c in layer) for layer in layers) + GAP_Y * max(len(layers) - 1, 0)
        title_w = len(box.label) * CHAR_W + 2 * PAD
        box.w = max(width + 2 * PAD, title_w, 60)
        box.h = height + TITLE_H + 2 * PAD
    for box in order:  # parents before children: absolute positions
        y = box.y + TITLE_H + PAD
        for layer in layers_of[id(box)]:
            width = sum(c.w for c in layer) + GAP_X * (len(layer) - 1)
            x = box.x + (box.w - width) / 2
            row_h = max(c.h for c in layer)
            for child in layer:
                child.x, child.y = x, y  # top-aligned: a layer reads as a row
                x += child.w + GAP_X
            y += row_h + GAP_Y


def _sides(a: Box, b: Box) -> tuple[Box, Box] | None:
    """The ancestors of ``a`` and ``b`` (themselves included) that are
    children of one cluster, their lowest common ancestor; None when one
    contains the other. Costs the depth between them, not from the root."""
    while a.depth > b.depth:
        a = a.parent
    while b.depth > a.depth:
        b = b.parent
    if a is b:
        return None
    while a.parent is not b.parent:
        a, b = a.parent, b.parent
    return a, b


def _size_leaves(cluster: Box) -> None:
    for child in cluster.children:
        if not child.cluster:
            child.w = max(len(child.label) * CHAR_W + 2 * PAD, 40)
            child.h = LINE_H


def _layers(cluster: Box, depends: list[tuple[Box, Box]]) -> list[list[Box]]:
    """Children in layers: each below the latest child it depends on
    (children come in definition order, so a dependency is always earlier)."""
    position = {id(c): i for i, c in enumerate(cluster.children)}
    preds: dict[int, list[Box]] = {}
    for src, dst in depends:
        if position[id(src)] < position[id(dst)]:
            preds.setdefault(id(dst), []).append(src)
    rank: dict[int, int] = {}
    for child in cluster.children:
        if child.last:
            continue
        rank[id(child)] = 1 + max(
            (rank[id(p)] for p in preds.get(id(child), ()) if id(p) in rank), default=-1
        )
    last = 1 + max(rank.values(), default=-1)
    layers: list[list[Box]] = [[] for _ in range(last + 1)]
    for child in cluster.children:
        layers[last if child.last else rank[id(child)]].append(child)
    return [layer for layer in layers if layer]


# -- SVG --------------------------------------------------------------------


def _svg(root: Box, edges: list[tuple[Box, Box, str]]) -> str:
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{root.w:.0f}" height="{root.h:.0f}" '
        f'viewBox="0 0 {root.w:.0f} {root.h:.0f}" font-family="monospace" font-size="12">',
        "<defs>",
    ]
    for kind, colour in EDGE_COLOURS.items():
        out.append(
            f'<marker id="arrow-{kind}" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" '
            f'markerHeight="7" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" '
            f'fill="{colour}"/></marker>'
        )
    out.append("</defs>")
    clusters: list[Box] = []
    nodes: list[Box] = []
    stack = [root]
    while stack:
        box = stack.pop()
        if box.cluster:
            clusters.append(box)
            stack.extend(reversed(box.children))
        else:
            nodes.append(box)
    # Clusters, then edges, then nodes: edges show over clusters, under labels.
    for box in clusters:
        if box is root and box.kind == "module":
            continue
        out.append(
            f'<g class="cluster {box.kind}"><title>{html.escape(box.title or box.label)}</title>'
            f'<rect x="{box.x:.1f}" y="{box.y:.1f}" width="{box.w:.1f}" height="{box.h:.1f}" '
            f'rx="6" fill="{CLUSTER_COLOURS.get(box.kind, "#f7f7f7")}" stroke="#90a4ae" '
            f'stroke-dasharray="{"none" if box.kind == "function" else "4 3"}"/>'
            f'<text x="{box.x + PAD:.1f}" y="{box.y + 15:.1f}" font-weight="bold">'
            f"{html.escape(box.label)}</text></g>"
        )
    for src, dst, kind in edges:
        x1, y1 = src.x + src.w / 2, src.y + src.h
        x2, y2 = dst.x + dst.w / 2, dst.y
        if y2 < y1:  # an edge upwards (recursion): leave from the side
            x1, y1 = src.x + src.w, src.y + src.h / 2
        bend = max(abs(y2 - y1) / 2, 12)
        out.append(
            f'<path class="edge {kind}" d="M {x1:.1f} {y1:.1f} C {x1:.1f} {y1 + bend:.1f} '
            f'{x2:.1f} {y2 - bend:.1f} {x2:.1f} {y2:.1f}" fill="none" '
            f'stroke="{EDGE_COLOURS[kind]}" stroke-width="{1.8 if kind != "data" else 1.1}" '
            f'marker-end="url(#arrow-{kind})"/>'
        )
    for box in nodes:
        stroke = "#ef6c00" if box.kind in ("state", "cell") else "#546e7a"
        out.append(
            f'<g class="node {box.kind}"><title>{html.escape(box.title or box.label)}</title>'
            f'<rect x="{box.x:.1f}" y="{box.y:.1f}" width="{box.w:.1f}" height="{box.h:.1f}" '
            f'rx="{10 if box.kind == "param" else 3}" fill="{COLOURS.get(box.kind, "#ffffff")}" '
            f'stroke="{stroke}"/><text x="{box.x + box.w / 2:.1f}" y="{box.y + 15:.1f}" '
            f'text-anchor="middle">{html.escape(box.label)}</text></g>'
        )
    out.append("</svg>")
    return "\n".join(out)


class Graph:
    """A dataflow picture: ``svg`` (text), ``save(path)``; Jupyter shows it."""

    def __init__(self, svg: str) -> None:
        self.svg = svg

    def __repr__(self) -> str:
        return f"<effir dataflow picture: {len(self.svg)} bytes of SVG>"

    def _repr_svg_(self) -> str:
        return self.svg

    def save(self, path: str) -> None:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(self.svg)


def visualize(target: IRModule | Function, functions: list[str] | None = None) -> Graph:
    """A dataflow picture of a function, or of a module's functions (all, or
    those named in ``functions``), one cluster each."""
    root = Box("", "module", cluster=True)
    if isinstance(target, IRModule):
        names = (
            list(target.functions)
            if functions is None
            else [n.removeprefix("@") for n in functions]
        )
        builder = _Builder(target)
        for name in names:
            builder.function(name, target[name], root)
    elif isinstance(target, Function):
        builder = _Builder(None)
        builder.function("fn", target, root)
    else:
        raise TypeError(
            f"visualize: expected an IRModule or a Function, got {type(target).__name__}"
        )
    # The module's functions go one below the other.
    for child in root.children:
        child.last = False
    _layout_module(root, builder.edges)
    return Graph(_svg(root, builder.edges))


def _layout_module(root: Box, edges: list[tuple[Box, Box, str]]) -> None:
    """Each function laid out on its own, then stacked."""
    _layout(root, edges)
    # _layout put the (independent) functions side by side; stack them instead.
    y = PAD
    for child in root.children:
        dx, dy = PAD - child.x, y - child.y
        _shift(child, dx, dy)
        y += child.h + GAP_Y
    root.w = max((c.w for c in root.children), default=0) + 2 * PAD
    root.h = y - GAP_Y + PAD


def _shift(box: Box, dx: float, dy: float) -> None:
    stack = [box]
    while stack:
        b = stack.pop()
        b.x += dx
        b.y += dy
        stack.extend(b.children)
