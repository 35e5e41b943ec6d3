"""A hypothesis strategy for random effectful (A1) effir programs, as text.

The state-passing property (``test_state_passing_property.py``) runs each
program in the interpreter before and after ``explicate`` + ``state_passing``
and compares results, final state and printed outputs bit for bit. So the
programs here exercise every way an effect can hide: in global cells read and
written directly, in the effectful surface operators, in branches, clauses,
loop bodies, recursion and closures.

What a program contains (each with a fair probability; ``A1Program.features``
names those a program uses):

- global cells, declared in a random order: two key cells ``@rng`` and
  ``@rng2``, tensor cells ``@acc`` (4 floats), ``@cnt`` (a scalar) and
  ``@mat`` (3 x 4), and the batch-norm cell ``@bn`` holding
  ``(running_mean, running_var)``;
- ``ref_read``/``ref_write`` of those cells, ``nn.dropout`` on ``@rng`` or
  ``@rng2`` (rates 0 and 1 included), ``nn.batch_norm`` with
  ``training=True`` and ``False``, ``debug.print``, and keys read from a cell,
  split, written back and drawn from (``random.uniform``/``random.normal``);
- global functions calling each other (a DAG), a recursive ``@rec`` counting
  down through an ``if``, mutually recursive ``@even``/``@odd``, ``@fold``
  recursing over a list ADT, ``@make`` returning a closure and ``@apply``
  calling the closure it is given (sometimes polymorphic);
- ``if`` and ``match`` (on ``Opt`` and ``VList``) whose branches touch
  different cells; ``cf.foreach`` (full, map and scan forms) and
  ``cf.while_loop`` whose bodies read and write cells and draw dropout, and
  whose condition sometimes reads a cell, prints, or draws dropout;
- closures touching cells: let-bound and called, stored in a tuple and
  projected, chosen by an ``if``, passed to ``@apply``, returned by ``@make``,
  and let-bound recursive closures;
- local references that do not escape (``let %r = ref(%x); ...``), one kind
  holding a key that ``nn.dropout`` draws from.

Well-typed by construction: the generator tracks the type of every variable
in scope (a handful of fixed types, see ``V``, ``M``...) and only builds
expressions of known type. Run-time safety: recursion counts down from a
constant <= 3, every loop is bounded, batch norm always sees 3 values per
channel. Keys stay linear (the A2 verifier checks it): a key read from a cell
is split at once, one half written back and the other used once; a key cell is
never read otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import strategies as st

# The types the generator builds, as the text writes them.
V = "Tensor[(4), float32]"
M = "Tensor[(3, 4), float32]"
S = "float32"
I32 = "int32"
FN = f"fn ({V}) -> {V}"
OPT = "Opt"
VLIST = "VList"

ADTS = f"""type Opt {{ Some({V}), NoneT }}

type VList {{ VCons({V}, VList), VNil }}
"""

# name -> (type, initialiser)
CELLS: dict[str, tuple[str, str]] = {
    "rng": ("Key", "random.key(0)"),
    "rng2": ("Key", "random.key(42)"),
    "acc": (V, "zeros(shape=[4])"),
    "cnt": (S, "0f"),
    "mat": (M, "ones(shape=[3, 4])"),
    "bn": (f"({V}, {V})", "(zeros(shape=[4]), ones(shape=[4]))"),
}
KEY_CELLS = ("rng", "rng2")

# Global functions in call order: one may call only those after it (and
# itself, or its partner, with a counter), so every program terminates.
ORDER = ("main", "h0", "h1", "h2", "rec", "even", "fold", "make", "apply")
POS = {name: i for i, name in enumerate(ORDER)}
HELPERS = ("h0", "h1", "h2")

# Nesting depth of compound statements, and statements in a whole module.
MAX_DEPTH = 2
BUDGET = 30

RATES = ("0.0", "0.1", "0.5", "0.75", "1.0")

# Constructs that ``state_passing`` documents as rejected (with a located
# EffectError) rather than supported: feature -> text its message must hold.
# (None today: while_loop conditions that draw keys or print used to be.)
KNOWN_REJECTIONS: dict[str, str] = {}

# Every construct the generator can emit, for the coverage test.
FEATURES = frozenset(
    {
        "cell_read",
        "cell_write",
        "bn_cell_read",
        "bn_cell_write",
        "dropout",
        "dropout_rate_edge",
        "batch_norm_train",
        "batch_norm_infer",
        "print",
        "key_split",
        "if",
        "cell_in_condition",
        "match_opt",
        "match_list",
        "foreach",
        "foreach_map",
        "foreach_scan",
        "while_loop",
        "while_cond_reads",
        "while_cond_prints",
        "while_cond_writes",
        "closure_let",
        "closure_unannotated",
        "closure_tuple",
        "closure_select",
        "closure_hof",
        "hof_polymorphic",
        "closure_returned",
        "local_recursion",
        "local_ref",
        "local_key_ref",
        "helper_call",
        "recursion",
        "non_tail_recursion",
        "mutual_recursion",
        "adt_recursion",
        "result_tuple",
        "result_adt",
    }
)


class A1Program:
    """A module's text, the arguments of ``@main``, the seed of its ``State``
    (None: the declared initial keys) and the constructs it uses. Its repr is
    the program text, so hypothesis reports a failing example readably."""

    def __init__(
        self, text: str, args: tuple[np.ndarray, ...], seed: int | None, features: frozenset[str]
    ) -> None:
        self.text = text
        self.args = args
        self.seed = seed
        self.features = features

    def __repr__(self) -> str:
        args = ", ".join(np.array2string(a, separator=", ") for a in self.args)
        return f"A1Program(seed={self.seed}, args=[{args}])\n{self.text}"


@dataclass
class Ctx:
    """Where a statement is generated: the enclosing global (its position in
    ``ORDER`` bounds what it may call), the variables in scope with their
    types, and the nesting depth."""

    pos: int
    scope: list[tuple[str, str]]
    depth: int = 0

    def child(self, *pairs: tuple[str, str]) -> Ctx:
        return Ctx(self.pos, self.scope + list(pairs), self.depth + 1)

    def of(self, t: str) -> list[str]:
        return [name for name, vt in self.scope if vt == t]


_INTEGERS: dict[tuple[int, int], st.SearchStrategy[int]] = {}


@dataclass
class Gen:
    draw: Callable[[st.SearchStrategy[Any]], Any]
    budget: int = BUDGET
    counter: int = 0
    labels: int = 0
    needed: set[str] = field(default_factory=set)
    features: set[str] = field(default_factory=set)
    n_helpers: int = 0
    polymorphic_apply: bool = False

    # ------------------------------------------------------------ basics
    def int_(self, lo: int, hi: int) -> int:
        strategy = _INTEGERS.get((lo, hi))
        if strategy is None:
            strategy = _INTEGERS[(lo, hi)] = st.integers(lo, hi)
        return self.draw(strategy)

    def flip(self, p_true: int = 1, out_of: int = 2) -> bool:
        return self.int_(0, out_of - 1) < p_true

    def pick(self, items: list[Any] | tuple[Any, ...]) -> Any:
        return items[self.int_(0, len(items) - 1)]

    def fresh(self, hint: str = "v") -> str:
        self.counter += 1
        return f"%{hint}{self.counter}"

    def label(self) -> str:
        self.labels += 1
        return f"p{self.labels}"

    def use(self, feature: str) -> None:
        assert feature in FEATURES, feature
        self.features.add(feature)

    def vec(self, ctx: Ctx, recent: bool = True) -> str:
        """A variable of type V, usually a recent one."""
        vs = ctx.of(V)
        assert vs, "every scope holds a vector"
        return self.pick(vs[-3:] if recent and self.flip(2, 3) else vs)

    def matrix(self, ctx: Ctx, lines: list[str]) -> str:
        """A variable of type M, built from vectors when there is none."""
        ms = ctx.of(M)
        if ms and self.flip(3, 4):
            return self.pick(ms)
        m = self.fresh("m")
        rows = ", ".join(self.vec(ctx, recent=False) for _ in range(3))
        lines.append(f"let {m} = stack(({rows}));")
        ctx.scope.append((m, M))
        return m

    def bind(self, ctx: Ctx, lines: list[str], t: str, value: str, hint: str = "v") -> str:
        name = self.fresh(hint)
        lines.append(f"let {name} = {value};")
        ctx.scope.append((name, t))
        return name

    def condition(self, ctx: Ctx) -> str:
        ints = ctx.of(I32)
        kind = self.int_(0, 3 if ints else 2)
        if kind == 0:
            return f"sum({self.vec(ctx)}) < 0f"
        if kind == 1:
            return f"max({self.vec(ctx)}) > 0.5f"
        if kind == 2:
            self.use("cell_in_condition")
            return f"ref_read(@cnt) < {self.pick(('0f', '1f', '3f'))}"
        return f"{self.pick(ints)} > 1"

    # ------------------------------------------------------------ blocks
    def block(self, ctx: Ctx, finish: Callable[[Ctx, list[str]], str], most: int) -> list[str]:
        """Statements, then the result expression ``finish`` builds."""
        lines: list[str] = []
        for _ in range(self.int_(0, most)):
            if self.budget <= 0:
                break
            self.budget -= 1
            self.statement(ctx, lines)
        lines.append(finish(ctx, lines))
        return lines

    def vec_result(self, ctx: Ctx, lines: list[str]) -> str:
        if self.flip(1, 4):
            return f"add({self.vec(ctx)}, {self.vec(ctx)})"
        return self.vec(ctx)

    @staticmethod
    def braced(head: str, body: list[str], tail: str = "}") -> list[str]:
        return [head, *("  " + line for line in body), tail]

    # ------------------------------------------------------------ statements
    def statement(self, ctx: Ctx, lines: list[str]) -> None:
        simple: list[tuple[int, Callable[[Ctx, list[str]], None]]] = [
            (4, self.pure),
            (3, self.cell_read),
            (3, self.cell_write),
            (4, self.dropout),
            (2, self.batch_norm),
            (2, self.print_),
            (2, self.key_draw),
            (2, self.local_ref),
            (2, self.call_helper),
            (2, self.call_recursive),
            (1, self.call_make),
            (1, self.closure_hof),
            (1, self.call_fn_var),
        ]
        compound: list[tuple[int, Callable[[Ctx, list[str]], None]]] = [
            (3, self.if_),
            (2, self.match_opt),
            (1, self.match_list),
            (1, self.call_fold),
            (2, self.foreach),
            (2, self.while_loop),
            (2, self.closure_let),
            (1, self.closure_tuple),
            (1, self.closure_select),
            (1, self.local_recursion),
        ]
        choices = simple + (compound if ctx.depth < MAX_DEPTH else [])
        total = sum(w for w, _ in choices)
        roll = self.int_(0, total - 1)
        for weight, make in choices:
            if roll < weight:
                make(ctx, lines)
                return
            roll -= weight

    def pure(self, ctx: Ctx, lines: list[str]) -> None:
        a, b = self.vec(ctx), self.vec(ctx)
        if ctx.of(M) and self.flip(1, 4):
            m = self.pick(ctx.of(M))
            self.bind(ctx, lines, M, f"tanh(add({m}, {a}))", "m")
            return
        value = self.pick(
            (
                f"add({a}, {b})",
                f"multiply({a}, 0.5f)",
                f"tanh({a})",
                f"subtract({a}, {b})",
                f"sigmoid({a})",
                f"maximum({a}, {b})",
            )
        )
        self.bind(ctx, lines, V, value)

    def cell_read(self, ctx: Ctx, lines: list[str]) -> None:
        self.use("cell_read")
        cell = self.pick(("acc", "acc", "cnt", "mat", "bn"))
        if cell == "acc":
            self.bind(ctx, lines, V, "ref_read(@acc)")
        elif cell == "cnt":
            self.bind(ctx, lines, V, f"multiply({self.vec(ctx)}, ref_read(@cnt))")
        elif cell == "mat":
            self.bind(ctx, lines, M, "ref_read(@mat)", "m")
        else:
            self.use("bn_cell_read")
            pair = self.bind(ctx, lines, f"({V}, {V})", "ref_read(@bn)", "s")
            self.bind(ctx, lines, V, f"{pair}.{self.int_(0, 1)}")

    def cell_write(self, ctx: Ctx, lines: list[str]) -> None:
        self.use("cell_write")
        cell = self.pick(("acc", "acc", "cnt", "mat", "bn"))
        if cell == "acc":
            value = self.pick((self.vec(ctx), f"add(ref_read(@acc), {self.vec(ctx)})"))
        elif cell == "cnt":
            value = f"add(ref_read(@cnt), {self.pick(('1f', f'sum({self.vec(ctx)})'))})"
        elif cell == "mat":
            value = self.matrix(ctx, lines)
        else:
            self.use("bn_cell_write")
            value = f"(tanh({self.vec(ctx)}), sigmoid({self.vec(ctx)}))"
        if self.flip(1, 4):
            self.bind(ctx, lines, "()", f"ref_write(@{cell}, {value})", "u")
        else:
            lines.append(f"ref_write(@{cell}, {value});")

    def dropout(self, ctx: Ctx, lines: list[str]) -> None:
        self.use("dropout")
        rate = self.pick(RATES)
        if rate in ("0.0", "1.0"):
            self.use("dropout_rate_edge")
        cell = self.pick(KEY_CELLS)
        if self.flip(1, 4):
            m = self.matrix(ctx, lines)
            self.bind(ctx, lines, M, f"nn.dropout({m}, @{cell}, rate={rate})", "m")
        else:
            self.bind(ctx, lines, V, f"nn.dropout({self.vec(ctx)}, @{cell}, rate={rate})")

    def batch_norm(self, ctx: Ctx, lines: list[str]) -> None:
        m = self.matrix(ctx, lines)
        gamma, beta = self.vec(ctx, recent=False), self.vec(ctx, recent=False)
        training = self.flip()
        self.use("batch_norm_train" if training else "batch_norm_infer")
        attrs = ", training=True" if training else self.pick(("", ", training=False"))
        if training and self.flip(1, 3):
            attrs += ", momentum=0.25"
        y = self.bind(ctx, lines, M, f"nn.batch_norm({m}, {gamma}, {beta}, @bn{attrs})", "m")
        if self.flip():
            self.bind(ctx, lines, V, f"mean({y}, axis=[0])")

    def print_(self, ctx: Ctx, lines: list[str]) -> None:
        self.use("print")
        kind = self.int_(0, 3)
        if kind == 0 and ctx.of(M):
            value = self.pick(ctx.of(M))
        elif kind == 1:
            value = f"sum({self.vec(ctx)})"
        elif kind == 2:
            value = f"({self.vec(ctx)}, {self.vec(ctx)})"
        else:
            value = self.vec(ctx)
        call = f'debug.print({value}, label="{self.label()}")'
        if kind == 3 and self.flip():
            self.bind(ctx, lines, V, call)
        else:
            lines.append(call + ";")

    def key_draw(self, ctx: Ctx, lines: list[str]) -> None:
        """Split a cell's key, write one half back, draw once from the other."""
        self.use("key_split")
        cell = self.pick(KEY_CELLS)
        k = self.bind(ctx, lines, "Key", f"ref_read(@{cell})", "k")
        num = self.pick((2, 2, 3))
        ks = self.bind(ctx, lines, "keys", f"random.split({k}, num={num})", "ks")
        keep = self.int_(0, num - 1)
        lines.append(f"ref_write(@{cell}, {ks}.{keep});")
        used = [i for i in range(num) if i != keep]
        draw = self.pick(("random.uniform({}, shape=[4])", "random.normal({}, shape=[4])"))
        self.bind(ctx, lines, V, draw.format(f"{ks}.{used[0]}"))
        if len(used) > 1 and self.flip():
            self.bind(ctx, lines, V, f"random.uniform({ks}.{used[1]}, shape=[4], low=-1.0)")

    def local_ref(self, ctx: Ctx, lines: list[str]) -> None:
        if self.flip(1, 4):
            self.use("local_key_ref")
            r = self.bind(ctx, lines, "Ref[Key]", f"ref(random.key({self.int_(0, 9)}))", "r")
            self.bind(ctx, lines, V, f"nn.dropout({self.vec(ctx)}, {r}, rate=0.5)")
            if self.flip():
                self.bind(ctx, lines, V, f"nn.dropout({self.vec(ctx)}, {r}, rate=0.25)")
            return
        self.use("local_ref")
        r = self.bind(ctx, lines, f"Ref[{V}]", f"ref({self.vec(ctx)})", "r")
        for _ in range(self.int_(1, 2)):
            lines.append(f"ref_write({r}, add(ref_read({r}), {self.vec(ctx)}));")
        self.bind(ctx, lines, V, f"ref_read({r})")

    def callee(self, ctx: Ctx, name: str) -> bool:
        """Whether ``name`` may be called here; marks it to be generated."""
        if POS[name] <= ctx.pos:
            return False
        self.needed.add(name)
        return True

    def call_helper(self, ctx: Ctx, lines: list[str]) -> None:
        helpers = [h for h in HELPERS[: self.n_helpers] if self.callee(ctx, h)]
        if not helpers:
            self.pure(ctx, lines)
            return
        self.use("helper_call")
        self.bind(ctx, lines, V, f"@{self.pick(helpers)}({self.vec(ctx)})")

    def call_recursive(self, ctx: Ctx, lines: list[str]) -> None:
        name = self.pick(("rec", "even"))
        if not self.callee(ctx, name):
            self.pure(ctx, lines)
            return
        self.use("recursion" if name == "rec" else "mutual_recursion")
        self.bind(ctx, lines, V, f"@{name}({self.int_(0, 3)}, {self.vec(ctx)})")

    def call_fold(self, ctx: Ctx, lines: list[str]) -> None:
        if not self.callee(ctx, "fold"):
            self.match_list(ctx, lines)
            return
        self.use("match_list")
        self.use("adt_recursion")
        items = [self.vec(ctx, recent=False) for _ in range(self.int_(0, 3))]
        lst = "VNil"
        for item in reversed(items):
            lst = f"VCons({item}, {lst})"
        lv = self.bind(ctx, lines, VLIST, lst, "l")
        self.bind(ctx, lines, V, f"@fold({lv}, {self.vec(ctx)})")

    def call_make(self, ctx: Ctx, lines: list[str]) -> None:
        if not self.callee(ctx, "make"):
            self.pure(ctx, lines)
            return
        self.use("closure_returned")
        f = self.bind(ctx, lines, FN, f"@make({self.vec(ctx)})", "f")
        self.bind(ctx, lines, V, f"{f}({self.vec(ctx)})")

    def closure_hof(self, ctx: Ctx, lines: list[str]) -> None:
        if not self.callee(ctx, "apply"):
            self.pure(ctx, lines)
            return
        self.use("closure_hof")
        f = self.fn_var(ctx, lines)
        self.bind(ctx, lines, V, f"@apply({f}, {self.vec(ctx)})")

    def fn_var(self, ctx: Ctx, lines: list[str]) -> str:
        """A variable of type FN, making a closure if there is none."""
        fs = ctx.of(FN)
        if fs and self.flip(2, 3):
            return self.pick(fs)
        return self.make_closure(ctx, lines)

    def call_fn_var(self, ctx: Ctx, lines: list[str]) -> None:
        if not ctx.of(FN):
            self.pure(ctx, lines)
            return
        self.bind(ctx, lines, V, f"{self.pick(ctx.of(FN))}({self.vec(ctx)})")

    def make_closure(self, ctx: Ctx, lines: list[str]) -> str:
        self.use("closure_let")
        a = self.fresh("a")
        inner = ctx.child((a, V))
        f = self.fresh("f")
        if self.flip(1, 3):
            # an unannotated parameter: inference learns it from the calls
            self.use("closure_unannotated")
            head = f"let {f} = fn ({a}) {{"
        else:
            head = f"let {f} = fn ({a}: {V}) -> {V} {{"
        body = self.block(inner, self.vec_result, 3)
        lines.extend(self.braced(head, body, "};"))
        ctx.scope.append((f, FN))
        return f

    def closure_let(self, ctx: Ctx, lines: list[str]) -> None:
        f = self.make_closure(ctx, lines)
        for _ in range(self.int_(1, 2)):
            self.bind(ctx, lines, V, f"{f}({self.vec(ctx)})")

    def closure_tuple(self, ctx: Ctx, lines: list[str]) -> None:
        self.use("closure_tuple")
        f = self.fn_var(ctx, lines)
        t = self.bind(ctx, lines, f"({FN}, {V})", f"({f}, {self.vec(ctx)})", "t")
        if self.flip():
            self.bind(ctx, lines, V, f"{t}.0({t}.1)")
        else:
            g = self.bind(ctx, lines, FN, f"{t}.0", "f")
            self.bind(ctx, lines, V, f"{g}({self.vec(ctx)})")

    def closure_select(self, ctx: Ctx, lines: list[str]) -> None:
        """Which closure runs is decided at run time."""
        self.use("closure_select")
        f = self.make_closure(ctx, lines)
        g = self.fn_var(ctx, lines)
        h = self.fresh("f")
        lines.append(f"let {h} = if ({self.condition(ctx)}) {{ {f} }} else {{ {g} }};")
        ctx.scope.append((h, FN))
        self.bind(ctx, lines, V, f"{h}({self.vec(ctx)})")

    def local_recursion(self, ctx: Ctx, lines: list[str]) -> None:
        self.use("local_recursion")
        loop, i, z = self.fresh("loop"), self.fresh("i"), self.fresh("z")
        inner = ctx.child((i, I32), (z, V))
        body = self.block(inner, lambda c, ls: f"{loop}(subtract({i}, 1), {self.vec(c)})", 2)
        lines.append(f"let {loop} = fn ({i}: {I32}, {z}: {V}) -> {V} {{")
        lines.append(f"  if ({i} <= 0) {{")
        lines.append(f"    {z}")
        lines.extend(self.braced("  } else {", ["  " + line for line in body], "  }"))
        lines.append("};")
        self.bind(ctx, lines, V, f"{loop}({self.int_(0, 3)}, {self.vec(ctx)})")

    def if_(self, ctx: Ctx, lines: list[str]) -> None:
        self.use("if")
        cond = self.condition(ctx)
        then = self.block(ctx.child(), self.vec_result, 3)
        else_ = self.block(ctx.child(), self.vec_result, 3)
        y = self.fresh()
        lines.extend(self.braced(f"let {y} = if ({cond}) {{", then, "} else {"))
        lines.extend(self.braced("", else_, "};")[1:])
        ctx.scope.append((y, V))

    def match_opt(self, ctx: Ctx, lines: list[str]) -> None:
        self.use("match_opt")
        x = self.vec(ctx)
        o = self.fresh("o")
        if self.flip(3, 4):
            lines.append(f"let {o} = if ({self.condition(ctx)}) {{ Some({x}) }} else {{ NoneT }};")
        else:
            lines.append(f"let {o}: {OPT} = {self.pick((f'Some({x})', 'NoneT'))};")
        ctx.scope.append((o, OPT))
        p = self.fresh("p")
        some = self.block(ctx.child((p, V)), self.vec_result, 3)
        none = self.block(ctx.child(), self.vec_result, 2)
        y = self.fresh()
        lines.append(f"let {y} = match ({o}) {{")
        lines.extend("  " + line for line in self.braced(f"Some({p}) => {{", some, "},"))
        pattern = "NoneT" if self.flip(2, 3) else "_"
        lines.extend("  " + line for line in self.braced(f"{pattern} => {{", none, "},"))
        lines.append("};")
        ctx.scope.append((y, V))

    def match_list(self, ctx: Ctx, lines: list[str]) -> None:
        self.use("match_list")
        items = [self.vec(ctx, recent=False) for _ in range(self.int_(0, 2))]
        lst = "VNil"
        for item in reversed(items):
            lst = f"VCons({item}, {lst})"
        lv = self.bind(ctx, lines, VLIST, lst, "l")
        h, rest = self.fresh("h"), self.fresh("l")
        cons = self.block(ctx.child((h, V), (rest, VLIST)), self.vec_result, 2)
        nil = self.block(ctx.child(), self.vec_result, 2)
        y = self.fresh()
        lines.append(f"let {y} = match ({lv}) {{")
        lines.extend("  " + line for line in self.braced(f"VCons({h}, {rest}) => {{", cons, "},"))
        lines.extend("  " + line for line in self.braced("VNil => {", nil, "},"))
        lines.append("};")
        ctx.scope.append((y, V))

    def foreach(self, ctx: Ctx, lines: list[str]) -> None:
        xs = self.matrix(ctx, lines)
        form = self.pick(("full", "full", "map", "scan"))
        self.use({"full": "foreach", "map": "foreach_map", "scan": "foreach_scan"}[form])
        xt, s = self.fresh("xt"), self.fresh("s")
        state_t = "()" if form == "map" else V
        inner = ctx.child((xt, V), *([(s, V)] if form != "map" else []))

        def finish(c: Ctx, ls: list[str]) -> str:
            out = "()" if form == "scan" else self.vec(c)
            new = "()" if form == "map" else self.vec(c)
            return f"({out}, {new})"

        body = self.block(inner, finish, 3)
        b = self.fresh("body")
        lines.extend(self.braced(f"let {b} = fn ({xt}: {V}, {s}: {state_t}) {{", body, "};"))
        init = "()" if form == "map" else self.vec(ctx)
        r = self.bind(ctx, lines, f"({M}, {state_t})", f"cf.foreach({b}, {xs}, {init})", "r")
        if form != "scan":
            self.bind(ctx, lines, M, f"{r}.0", "m")
        if form != "map":
            self.bind(ctx, lines, V, f"{r}.1")

    def while_loop(self, ctx: Ctx, lines: list[str]) -> None:
        self.use("while_loop")
        limit = self.int_(0, 3)
        vars_t = f"({I32}, {V})"
        st_c, st_b = self.fresh("st"), self.fresh("st")
        ann = f": {vars_t}" if self.flip(2, 3) else ""
        c = self.fresh("cond")
        kind = self.int_(0, 5)
        if kind == 0:
            # the condition writes state: it moves into the loop's step
            self.use("while_cond_writes")
            q = self.fresh("q")
            cell = self.pick(KEY_CELLS)
            cond_body = [
                f"let {q} = nn.dropout({st_c}.1, @{cell}, rate=0.5);",
                f"logical_and({st_c}.0 < {limit}, sum({q}) > -100f)",
            ]
        elif kind == 1:
            self.use("while_cond_reads")
            cond_body = [f"logical_and({st_c}.0 < {limit}, ref_read(@cnt) < 5f)"]
        elif kind == 2:
            self.use("while_cond_prints")
            cond_body = [
                f'debug.print(sum({st_c}.1), label="{self.label()}");',
                f"{st_c}.0 < {limit}",
            ]
        else:
            cond_body = [f"{st_c}.0 < {limit}"]
        lines.extend(self.braced(f"let {c} = fn ({st_c}{ann}) {{", cond_body, "};"))
        i, x = self.fresh("i"), self.fresh("x")
        inner = ctx.child((i, I32), (x, V))
        body = self.block(
            inner, lambda cc, ls: f"({self.vec(cc)}, (add({i}, 1), {self.vec(cc)}))", 3
        )
        b = self.fresh("body")
        head = f"let {b} = fn ({st_b}{ann}) {{"
        lines.extend(
            self.braced(head, [f"let {i} = {st_b}.0;", f"let {x} = {st_b}.1;", *body], "};")
        )
        max_it = self.pick(("", ", max_iterations=0", ", max_iterations=2", ", max_iterations=5"))
        w = self.bind(
            ctx,
            lines,
            f"(Tensor[(?, 4), float32], {vars_t})",
            f"cf.while_loop({c}, {b}, (0, {self.vec(ctx)}){max_it})",
            "w",
        )
        if self.flip():
            self.bind(ctx, lines, V, f"sum({w}.0, axis=[0])")
        self.bind(ctx, lines, V, f"{w}.1.1")

    # ------------------------------------------------------------ globals
    def function(self, name: str) -> list[str]:
        pos = POS[name]
        if name in HELPERS:
            ctx = Ctx(pos, [("%x", V)])
            body = self.block(ctx, self.vec_result, 4)
            return self.braced(f"def @{name}(%x: {V}) -> {V} {{", body)
        if name == "rec":
            return self.rec()
        if name == "even":
            return self.even_odd()
        if name == "fold":
            return self.fold()
        if name == "make":
            ctx = Ctx(pos, [("%x", V), ("%y", V)], depth=1)
            body = self.block(ctx, self.vec_result, 3)
            inner = self.braced(f"fn (%y: {V}) -> {V} {{", body)
            return self.braced(f"def @make(%x: {V}) -> {FN} {{", inner)
        assert name == "apply"
        if self.polymorphic_apply:
            self.use("hof_polymorphic")
            return [
                "def @apply[A](%f: fn (A) -> A, %x: A) -> A {",
                "  %f(%f(%x))" if self.flip() else "  %f(%x)",
                "}",
            ]
        ctx = Ctx(pos, [("%f", FN), ("%x", V)], depth=1)
        lines = ["let %y = %f(%x);"]
        ctx.scope.append(("%y", V))
        body = self.block(ctx, lambda c, ls: f"%f({self.vec(c)})", 2)
        return self.braced(f"def @apply(%f: {FN}, %x: {V}) -> {V} {{", lines + body)

    def rec(self) -> list[str]:
        ctx = Ctx(POS["rec"], [("%n", I32), ("%x", V)], depth=1)
        base = self.block(ctx.child(), self.vec_result, 2)
        step_ctx = ctx.child()
        if self.flip():
            step = self.block(step_ctx, lambda c, ls: f"@rec(subtract(%n, 1), {self.vec(c)})", 3)
        else:
            self.use("non_tail_recursion")

            def finish(c: Ctx, ls: list[str]) -> str:
                ls.append(f"let %back = @rec(subtract(%n, 1), {self.vec(c)});")
                return f"add(%back, {self.vec(c)})"

            step = self.block(step_ctx, finish, 3)
        lines = self.braced("if (%n <= 0) {", base, "} else {")
        lines += self.braced("", step)[1:]
        return self.braced(f"def @rec(%n: {I32}, %x: {V}) -> {V} {{", lines)

    def even_odd(self) -> list[str]:
        out: list[str] = []
        for me, other in (("even", "odd"), ("odd", "even")):
            ctx = Ctx(POS["even"], [("%n", I32), ("%x", V)], depth=1)
            base = self.block(ctx.child(), self.vec_result, 1)
            step = self.block(
                ctx.child(), lambda c, ls, o=other: f"@{o}(subtract(%n, 1), {self.vec(c)})", 2
            )
            lines = self.braced("if (%n <= 0) {", base, "} else {")
            lines += self.braced("", step)[1:]
            out += self.braced(f"def @{me}(%n: {I32}, %x: {V}) -> {V} {{", lines)
            out.append("")
        return out[:-1]

    def fold(self) -> list[str]:
        ctx = Ctx(POS["fold"], [("%acc", V)], depth=1)
        cons = self.block(ctx.child(("%h", V)), lambda c, ls: f"@fold(%t, {self.vec(c)})", 2)
        nil = self.block(ctx.child(), self.vec_result, 1)
        lines = ["match (%l) {"]
        lines += ["  " + line for line in self.braced("VCons(%h, %t) => {", cons, "},")]
        lines += ["  " + line for line in self.braced("VNil => {", nil, "},")]
        lines.append("}")
        return self.braced(f"def @fold(%l: {VLIST}, %acc: {V}) -> {V} {{", lines)

    def main(self) -> list[str]:
        ctx = Ctx(0, [("%x", V), ("%m", M), ("%g", V), ("%b", V)])
        kind = self.pick(("vec", "vec", "tuple", "adt"))
        if kind == "vec":
            ret = V
            finish = self.vec_result
        elif kind == "tuple":
            self.use("result_tuple")
            ret = f"({V}, {S}, {M})"

            def finish(c: Ctx, ls: list[str]) -> str:
                return f"({self.vec(c)}, ref_read(@cnt), {self.pick(c.of(M))})"

        else:
            self.use("result_adt")
            ret = OPT

            def finish(c: Ctx, ls: list[str]) -> str:
                return f"if ({self.condition(c)}) {{ Some({self.vec(c)}) }} else {{ NoneT }}"

        body = self.block(ctx, finish, 8)
        head = f"def @main(%x: {V}, %m: {M}, %g: {V}, %b: {V}) -> {ret} {{"
        return self.braced(head, body)


def _vector(draw: Callable[[st.SearchStrategy[Any]], Any], shape: tuple[int, ...]) -> np.ndarray:
    size = int(np.prod(shape))
    values = draw(st.lists(st.integers(-8, 8), min_size=size, max_size=size))
    return (np.array(values, dtype=np.float32) / np.float32(4)).reshape(shape)


@st.composite
def a1_programs(draw: Callable[[st.SearchStrategy[Any]], Any]) -> A1Program:
    """A random effectful module (text), ``@main``'s arguments and a seed."""
    g = Gen(draw)
    g.n_helpers = g.int_(0, 3)
    g.polymorphic_apply = g.flip(1, 3)
    functions = {"main": g.main()}
    for name in ORDER[1:]:  # callees come later in ORDER: generate them lazily
        if name in g.needed:
            functions[name] = g.function(name)
    cells = draw(st.permutations(list(CELLS)))
    parts = ['#[version = "0.0.5"]', ADTS]
    parts += [f"global @{c}: Ref[{CELLS[c][0]}] = ref({CELLS[c][1]});" for c in cells]
    parts.append("")
    order = list(functions)
    if g.flip():
        order.reverse()  # definitions may come before or after their callers
    parts += ["\n".join(functions[name]) + "\n" for name in order]
    text = "\n".join(parts)
    args = (_vector(draw, (4,)), _vector(draw, (3, 4)), _vector(draw, (4,)), _vector(draw, (4,)))
    seed = draw(st.none() | st.integers(0, 3))
    return A1Program(text, args, seed, frozenset(g.features))
