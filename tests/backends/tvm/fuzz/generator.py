"""Typed random effir programs with their arguments, for differential testing
of the compiled path against the interpreter.

A program is ``@main`` built from *fragments*: each fragment is a few ``let``
bindings of one construct (an elementwise chain, an ``if`` on data, one form
of ``cf.foreach``, an ADT built and folded, ...), drawn over typed values
already bound (the pool), so every program type-checks. Which fragments may
be drawn is a set of *features* (``FEATURES``), one per class of construct
the compiled path must handle, so a test can switch a class on once its
backend fix has landed. ``deep`` programs (recursion and loops up to 10,000
steps) are a bucket of their own: they are slow to interpret.

Choices come from a ``Chooser``: ``RandomChooser`` (a seed, for the fuzzer's
CLI and the suite's fixed set) or ``HypothesisChooser`` (a Hypothesis
``draw``, so that ``test_compile_property`` shrinks its failures). The same
choices always give the same program and the same arguments.
"""

from __future__ import annotations

import random
import re
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

FEATURES: dict[str, str] = {
    "base": "float elementwise ops, reductions, dense, transpose, if on data, a static "
    "foreach with state and output, a while loop with outputs, dropout, boolean_mask "
    "reduced back to a static shape",
    "int": "integer dtypes int8..uint64 at their boundary values (0, 1, -1, min, max): "
    "wrap-around arithmetic, negative, divide, power, sum, casts, comparisons",
    "keys_if": "keys and dropout through if (a key returned from a branch, dropout in one "
    "branch then after the if) and through match on tuples; random.split with num 0, 1, 3; "
    "three dropouts over 100,000 elements",
    "foreach_forms": "cf.foreach over a static length: map (state ()), scan (output ()), "
    "several inputs and states, an if in the body",
    "foreach_symbolic": "the foreach forms over a symbolic length n (0 included)",
    "foreach_unknown": "the foreach forms over a ? length",
    "while_forms": "cf.while_loop without per-step outputs, with tuple outputs, with and "
    "without max_iterations",
    "adt": "a List ADT built by recursion and folded by match",
    "dynamic": "data-dependent shapes (boolean_mask, argwhere) with kernels after them, "
    "results of ? shape, two masks' counts meeting in one kernel, dropout over a mask",
    "errors": "inputs that make the interpreter raise: integer division by zero, a negative "
    "integer power, take(mode=fast) out of range, a bad dyn.reshape or reshape of a ? "
    "dimension, dyn.zeros of a negative size, max/min/argmax/take over an empty axis",
    "deep": "recursion, while loops and foreach of up to 10,000 steps (the deep bucket)",
    # The widened groups (WIDENED): the shapes of program the adversarial
    # review found and the older groups never drew.
    "joins": "if and match whose branches have unknown, zero, symbolic and static sizes, "
    "a zero-trip while loop's stacked outputs joined with data (shape_of and sum after)",
    "growing": "cf.while_loop and cf.foreach whose state grows (Tensor[(?), ...] state "
    "started empty or from a mask)",
    "strided": "strided_slice and strided_set with negative (and mixed) strides, begins and "
    "ends out of range",
    "int_mixed": "mixed-width integer casts (an int64 accumulator of a narrower counter) and "
    "nested integer arithmetic (divide of divide) across dtypes",
    "const_fold": "constants that fold to zero (float division by them: IEEE inf/nan; integer "
    "division by them: an EvalError), negative literals, random.key and fold_in of "
    "negative values",
    "adt_tuples": "a match on a tuple of ADT values whose constructors the caller makes "
    "(known to partial evaluation) or data decides",
    "prelude": "the prelude's functions: @map, @foldl, @foldr, @length, @nth, @rev, @zip, "
    "@filter, @iterate, @tmap, @size",
    "prints": "debug.print of a tensor, a tuple, a key, an ADT value and ()",
    "global_body": "global functions as loop bodies and conditions (a symbolic length "
    "included); a symbolic foreach with () state and () output returned",
    "nesting": "nesting near the documented limits: 499 nested ifs (MAX_NESTED_BLOCKS), "
    "constants of 1024 and 1025 elements (constant folding's limit), long let chains, "
    "deeply nested tuples and matches",
}
WIDENED = frozenset(
    ["joins", "growing", "strided", "int_mixed", "const_fold", "adt_tuples", "prelude"]
    + ["prints", "global_body", "nesting"]
)
"""The groups of the widened generator (the rest are the original ones)."""

INT_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
_SUFFIX = {
    "int8": "i8",
    "int16": "i16",
    "int32": "",
    "int64": "i64",
    "uint8": "u8",
    "uint16": "u16",
    "uint32": "u32",
    "uint64": "u64",
}
HEADER = '#[version = "0.0.5"]\n'
RNG_CELL = "global @rng: Ref[Key] = ref(random.key(5));\n"
LIST_ADT = "type List[A] { Cons(A, List[A]), Nil }\n"
MAYBE_ADT = "type Maybe[A] { Just(A), Nothing }\n"
NESTED_IF_DEPTHS = (3, 40, 250, 499)  # docs/backend.md: 500 blocks, the function's own included
DEEP_DEPTHS = (1000, 4000, 10000)

Dim = int | str
Shape = tuple[Dim, ...]


class Chooser(Protocol):
    """The source of every choice: an integer in ``[lo, hi]``."""

    def integer(self, lo: int, hi: int) -> int: ...


class RandomChooser:
    """Choices from a seeded ``random.Random``: the fuzzer's programs."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def integer(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)


class HypothesisChooser:
    """Choices from a Hypothesis ``draw``, so that failures shrink."""

    def __init__(self, draw: Callable) -> None:
        from hypothesis import strategies as st

        self.draw = draw
        self.st = st
        self.cache: dict[tuple[int, int], object] = {}

    def integer(self, lo: int, hi: int) -> int:
        strategy = self.cache.get((lo, hi))
        if strategy is None:
            strategy = self.cache[(lo, hi)] = self.st.integers(lo, hi)
        return self.draw(strategy)


@dataclass
class Program:
    """A program's text, its arguments and what it exercises."""

    text: str
    args: list[np.ndarray]
    features: frozenset[str]
    steps: int = 2  # calls from one State (dropout keys and cells carry over)
    label: str = ""
    fragments: tuple[str, ...] = ()  # what the program is made of, in order

    def __repr__(self) -> str:
        return f"\n# {self.label} features={sorted(self.features)}\n{self.text}"

    def describe(self) -> str:
        """The text and the arguments, to reproduce a failure."""
        with np.printoptions(threshold=50, edgeitems=3):
            args = "\n".join(
                f"#   arg {i}: {a.dtype}{list(a.shape)} = {np.array2string(a)}"
                for i, a in enumerate(self.args)
            )
        return f"# {self.label} features={sorted(self.features)} steps={self.steps}\n{args}\n{self.text}"


@dataclass
class Value:
    name: str
    shape: Shape
    dtype: str

    @property
    def static(self) -> bool:
        return all(isinstance(d, int) for d in self.shape)


def tensor_type(shape: Shape, dtype: str) -> str:
    dims = ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "")
    return f"Tensor[({dims}), {dtype}]"


def int_literal(value: int, dtype: str) -> str:
    return f"{value}{_SUFFIX[dtype]}"


def boundary_values(dtype: str) -> list[int]:
    info = np.iinfo(dtype)
    values = [0, 1, int(info.max), int(info.min)]
    values += [-1, int(info.min) + 1] if info.min < 0 else [int(info.max) - 1, 2]
    return values


F3 = tensor_type((3,), "float32")


@dataclass
class _Gen:
    """Draws one program: parameters, global definitions and @main's lines."""

    c: Chooser
    features: frozenset[str]
    params: list[tuple[str, str, np.ndarray]] = field(default_factory=list)
    values: list[Value] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    defs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    forced: list[str] = field(default_factory=list)  # always returned (errors, keys)
    used: set[str] = field(default_factory=set)
    uses_list: bool = False
    uses_prelude: bool = False  # prelude names (its List too): no LIST_ADT of our own
    uses_maybe: bool = False
    counter: int = 0
    np_rng: np.random.Generator | None = None
    n_steps: int | None = None  # the value of the symbolic dimension n
    names: list[str] = field(default_factory=list)  # the fragments drawn

    # ------------------------------------------------------------ helpers
    def choice(self, options):
        return options[self.c.integer(0, len(options) - 1)]

    def chance(self, n: int) -> bool:
        return self.c.integer(0, n - 1) == 0

    def fresh(self, prefix: str = "v") -> str:
        self.counter += 1
        return f"%{prefix}{self.counter}"

    def floats(self, shape: tuple[int, ...], scale: float = 1.0) -> np.ndarray:
        if self.np_rng is None:
            self.np_rng = np.random.default_rng(self.c.integer(0, 2**32 - 1))
        return (scale * self.np_rng.standard_normal(shape)).astype(np.float32)

    def param(self, type_text: str, value: np.ndarray, prefix: str = "p") -> str:
        name = f"%{prefix}{len(self.params)}"
        self.params.append((name, type_text, value))
        return name

    def bind(
        self,
        expr: str,
        shape: Shape,
        dtype: str,
        pool: bool = True,
        output: bool = True,
        annotation: str | None = None,
    ) -> str:
        """``let`` a new variable; ``pool``: later fragments may pick it;
        ``output``: it may be a result (not a key already consumed);
        ``annotation``: its type, written where nothing in ``expr`` fixes it
        (an empty list, whose later uses may not either)."""
        name = self.fresh()
        typed = f"{name}: {annotation}" if annotation is not None else name
        self.lines.append(f"let {typed} = {expr};")
        if pool:
            self.values.append(Value(name, shape, dtype))
        if output:
            self.outputs.append(name)
        return name

    def pick(self, shape: Shape | None = None, dtype: str = "float32") -> Value:
        pool = [v for v in self.values if v.dtype == dtype and (shape is None or v.shape == shape)]
        pool = pool if shape is not None else [v for v in pool if v.static]
        return self.choice(pool)

    # ------------------------------------------------------------ program
    def float_inputs(self) -> None:
        for shape in [(4, 3), (4, 3), (3, 3), (3,), (5, 3)]:
            name = self.param(tensor_type(shape, "float32"), self.floats(shape), "x")
            self.values.append(Value(name, shape, "float32"))

    def build(self, fragments: int, only: str | None = None) -> Program:
        self.float_inputs()
        menu = sorted(self.features - {"deep"})
        for _ in range(fragments):  # a feature, then one of its fragments
            feature = self.choice(menu)
            self.fragment(feature, self.choice(_FRAGMENTS[feature]))
        if only is not None:
            feature, kind = fragment_named(only)
            self.fragment(feature, kind)
        return self.finish(steps=2)

    def fragment(self, feature: str, kind: Callable[[_Gen], None]) -> None:
        self.used.add(feature)
        self.names.append(kind.__name__.removeprefix("f_"))
        kind(self)

    def finish(self, steps: int) -> Program:
        outs = list(dict.fromkeys(self.outputs[-3:] + self.forced))
        body = "\n  ".join(self.lines)
        used = body + " ".join(outs) + "".join(self.defs)
        # Parameters no fragment used are left out: a smaller program to read.
        self.params = [p for p in self.params if re.search(re.escape(p[0]) + r"\b", used)]
        params = ", ".join(f"{n}: {t}" for n, t, _ in self.params)
        adts = LIST_ADT if self.uses_list and not self.uses_prelude else ""
        adts += MAYBE_ADT if self.uses_maybe else ""
        text = HEADER + adts + RNG_CELL + "".join(self.defs)
        text += f"def @main({params}) {{\n  {body}\n  ({', '.join(outs)},)\n}}\n"
        args = [value for _, _, value in self.params]
        return Program(text, args, frozenset(self.used), steps, fragments=tuple(self.names))

    # ------------------------------------------------- base (the old static programs)
    def f_unary(self) -> None:
        x = self.pick()
        op = self.choice(["tanh", "sigmoid", "negative", "nn.relu", "exp"])
        arg = f"tanh({x.name})" if op == "exp" else x.name
        self.bind(f"{op}({arg})", x.shape, "float32")

    def f_binary(self) -> None:
        x = self.pick()
        y = self.pick(x.shape)
        op = self.choice(["add", "subtract", "multiply", "maximum"])
        self.bind(f"{op}({x.name}, {y.name})", x.shape, "float32")

    def f_reduce(self) -> None:
        x = self.pick((4, 3))
        op = self.choice(["sum", "mean", "max"])
        axis = self.choice([0, 1])
        self.bind(f"{op}({x.name}, axis=[{axis}])", (3,) if axis == 0 else (4,), "float32")

    def f_dense(self) -> None:
        x = self.pick((4, 3))
        self.bind(f"nn.dense({x.name}, %x2)", (4, 3), "float32")

    def f_transpose(self) -> None:
        x = self.pick((3, 3))
        self.bind(f"transpose({x.name})", (3, 3), "float32")

    def f_if(self) -> None:
        x = self.pick()
        y = self.pick(x.shape)
        self.bind(
            f"if (greater(sum({x.name}), sum({y.name}))) {{ tanh({x.name}) }} "
            f"else {{ multiply({y.name}, 0.5f) }}",
            x.shape,
            "float32",
        )

    def f_loop(self) -> None:
        h = self.pick((3,))
        step = (
            "if (greater(sum(%xt), 0f)) { tanh(add(%xt, %h)) } else { sigmoid(%h) }"
            if self.chance(2)
            else "tanh(add(multiply(%xt, 0.5f), %h))"
        )
        self.bind(
            f"cf.foreach(fn (%xt: {F3}, %h: {F3}) "
            f"{{ let %n = {step}; (sum(%n), %n) }}, %x4, {h.name}).1",
            (3,),
            "float32",
        )

    def f_while(self) -> None:  # as many steps as the data asks, at most 20
        h = self.pick((3,))
        state = f"(int32, {F3})"
        self.bind(
            f"cf.while_loop(fn (%s: {state}) {{ less(sum(multiply(%s.1, %s.1)), 50f) }}, "
            f"fn (%s: {state}) {{ let %y = add(multiply(%s.1, 1.5f), 0.25f); "
            f"(sum(%y), (add(%s.0, 1), %y)) }}, (0, {h.name}), max_iterations=20).1.1",
            (3,),
            "float32",
        )

    def f_mask(self) -> None:  # a data-dependent shape, reduced back to a static one
        x = self.pick((4, 3))
        mask = f"greater(sum({x.name}, axis=[1]), 0f)"
        self.bind(f"sum(boolean_mask({x.name}, {mask}), axis=[0])", (3,), "float32")

    def f_dropout(self) -> None:
        x = self.pick()
        self.bind(f"nn.dropout({x.name}, @rng, rate=0.5f)", x.shape, "float32")

    # ------------------------------------------------------------ integers
    def int_value(self, dtype: str | None = None) -> Value:
        """An int tensor of ``dtype`` (any int dtype if None), new or bound."""
        pool = [v for v in self.values if v.dtype in INT_DTYPES and v.shape == (4,)]
        if dtype is not None:
            pool = [v for v in pool if v.dtype == dtype]
        if pool and not self.chance(3):
            return self.choice(pool)
        dtype = dtype or self.choice(INT_DTYPES)
        data = np.array([self.int_draw(dtype) for _ in range(4)], dtype=dtype)
        name = self.param(tensor_type((4,), dtype), data, "i")
        value = Value(name, (4,), dtype)
        self.values.append(value)
        return value

    def int_draw(self, dtype: str) -> int:
        if self.chance(3):
            info = np.iinfo(dtype)
            return self.c.integer(int(info.min), int(info.max))
        return self.choice(boundary_values(dtype))

    def int_operand(self, dtype: str) -> str:
        # Mostly a boundary literal: constant folding and simplification
        # meet wrap-around there, which parameters alone do not show.
        if not self.chance(3):
            return int_literal(self.choice(boundary_values(dtype)), dtype)
        return self.int_value(dtype).name

    def nonzero(self, operand: str, dtype: str) -> str:
        one, zero = int_literal(1, dtype), int_literal(0, dtype)
        return f"where(equal({operand}, {zero}), {one}, {operand})"

    def f_int_arith(self) -> None:
        x = self.int_value()
        op = self.choice(["add", "subtract", "multiply", "maximum", "minimum"])
        y = self.int_operand(x.dtype)
        args = f"{y}, {x.name}" if self.chance(2) else f"{x.name}, {y}"
        self.bind(f"{op}({args})", (4,), x.dtype)

    def f_int_unary(self) -> None:
        x = self.int_value()
        op = self.choice(["negative", "nn.relu", "sum", "power2", "power3"])
        if op.startswith("power"):
            self.bind(f"power({x.name}, {int_literal(int(op[-1]), x.dtype)})", (4,), x.dtype)
        elif op == "sum":
            self.bind(f"sum({x.name})", (), x.dtype)
        else:
            self.bind(f"{op}({x.name})", (4,), x.dtype)

    def f_int_divide(self) -> None:
        x = self.int_value()
        y = self.int_operand(x.dtype)
        if y.startswith("%") or y.startswith(("0", "-0")):
            y = self.nonzero(y, x.dtype)
        self.bind(f"divide({x.name}, {y})", (4,), x.dtype)

    def f_int_cast(self) -> None:
        x = self.int_value()
        if self.chance(2):
            target = self.choice(INT_DTYPES)
            self.bind(f'cast({x.name}, dtype="{target}")', (4,), target)
        else:  # into the float world, where the base fragments pick it up
            self.bind(f'cast({x.name}, dtype="float32")', (4,), "float32")

    def f_int_compare(self) -> None:
        x = self.int_value()
        y = self.int_value(x.dtype)
        op = self.choice(["less", "greater_equal", "equal", "not_equal"])
        self.bind(
            f"where({op}({x.name}, {y.name}), {x.name}, {self.int_operand(x.dtype)})",
            (4,),
            x.dtype,
        )

    # -------------------------------------------------------- keys through if
    def cond(self) -> str:
        x = self.pick()
        return f"greater(sum({x.name}), 0f)"

    def f_dropout_in_branch(self) -> None:
        x = self.pick()
        then, other = f"nn.dropout({x.name}, @rng, rate=0.5f)", f"tanh({x.name})"
        if self.chance(2):
            then, other = other, then
        a = self.bind(f"if ({self.cond()}) {{ {then} }} else {{ {other} }}", x.shape, "float32")
        self.bind(f"nn.dropout({a}, @rng, rate=0.25f)", x.shape, "float32")

    def f_key_from_branch(self) -> None:
        k = self.bind(f"random.key({self.c.integer(0, 100)})", (), "key", False, False)
        k2 = self.bind(
            f"if ({self.cond()}) {{ random.split({k}).0 }} else {{ random.fold_in({k}, 3) }}",
            (),
            "key",
            False,
            False,
        )
        p = self.bind(f"random.split({k2})", (), "keys", False, False)
        self.bind(f"random.uniform({p}.0, shape=[3])", (3,), "float32")
        self.forced.append(f"{p}.1")

    def f_dropout_in_both(self) -> None:
        x = self.pick()
        a = self.bind(
            f"if ({self.cond()}) {{ nn.dropout({x.name}, @rng, rate=0.5f) }} "
            f"else {{ let %d = nn.dropout({x.name}, @rng, rate=0.25f); "
            f"nn.dropout(%d, @rng, rate=0.5f) }}",
            x.shape,
            "float32",
        )
        self.bind(f"add(nn.dropout({a}, @rng, rate=0.5f), {x.name})", x.shape, "float32")

    def f_split_num(self) -> None:
        k = self.bind(f"random.key({self.c.integer(0, 100)})", (), "key", False, False)
        num = self.choice([0, 1, 3])
        p = self.bind(f"random.split({k}, num={num})", (), "keys", False, False)
        if num:
            self.bind(f"random.normal({p}.{num - 1}, shape=[3])", (3,), "float32")
        else:
            self.forced.append(p)

    def f_dropouts_large(self) -> None:  # CSE and memory planning at a large size
        x = self.pick((3,))
        big = self.bind(f"add(zeros(shape=[100000]), sum({x.name}))", (100000,), "float32", False)
        a = self.bind(f"nn.dropout({big}, @rng, rate=0.5f)", (100000,), "float32", False, False)
        b = self.bind(f"nn.dropout({big}, @rng, rate=0.5f)", (100000,), "float32", False, False)
        c = self.bind(f"nn.dropout({a}, @rng, rate=0.5f)", (100000,), "float32", False, False)
        # max, not sum: a sum of 100,000 floats depends on the order of the
        # additions (beyond 1e-5), a max does not; the masks are compared exactly.
        self.bind(f"max(add(add({a}, {b}), {c}))", (), "float32", pool=False)

    def f_match_tuple(self) -> None:
        x = self.pick()
        y = self.pick(x.shape)
        t = self.bind(f"({x.name}, nn.dropout({y.name}, @rng, rate=0.5f))", (), "tuple", pool=False)
        self.bind(
            f"match ({t}) {{ (%a, %b) => add(nn.dropout(%a, @rng, rate=0.5f), %b) }}",
            x.shape,
            "float32",
        )

    # ----------------------------------------------------------- foreach forms
    def sequence(self, length: str) -> str:
        """A (L, 3) float sequence parameter: L static (5), symbolic or ?."""
        if length == "static":
            return "%x4"
        if length == "unknown":
            steps = self.choice([0, 1, 3, 6])
            return self.param(tensor_type(("?", 3), "float32"), self.floats((steps, 3)), "s")
        if self.n_steps is None:  # one value of the symbolic dimension per program
            self.n_steps = self.choice([0, 1, 3, 6])
        return self.param(tensor_type(("n", 3), "float32"), self.floats((self.n_steps, 3)), "s")

    def foreach_step(self, x: str, h: str) -> str:
        if self.chance(2):
            return f"if (greater(sum({x}), 0f)) {{ tanh(add({x}, {h})) }} else {{ sigmoid({h}) }}"
        return f"tanh(add(multiply({x}, 0.5f), {h}))"

    def foreach(self, length: str) -> None:
        xs = self.sequence(length)
        dim = 5 if length == "static" else ("n" if length == "symbolic" else "?")
        h = self.pick((3,))
        form = self.choice(["map", "scan", "multi"])
        if form == "map":  # the state is (); the closure captures %h
            r = self.whole(
                f"cf.foreach(fn (%xt: {F3}, %u: ()) "
                f"{{ ({self.foreach_step('%xt', h.name)}, ()) }}, {xs}, ())"
            )
            self.bind(f"sum({r}.0, axis=[0])", (3,), "float32")
        elif form == "scan":  # the per-step output is ()
            r = self.whole(
                f"cf.foreach(fn (%xt: {F3}, %h: {F3}) "
                f"{{ ((), {self.foreach_step('%xt', '%h')}) }}, {xs}, {h.name})"
            )
            self.bind(f"{r}.1", (3,), "float32")
        else:  # two inputs, two states, two outputs
            ys = self.bind(f"multiply({xs}, 0.5f)", (dim, 3), "float32", pool=False)
            state = f"({F3}, float32)"
            r = self.bind(
                f"cf.foreach(fn (%xt: ({F3}, {F3}), %s: {state}) {{ "
                f"let %n = {self.foreach_step('add(%xt.0, %xt.1)', '%s.0')}; "
                f"((%n, sum(%xt.1)), (%n, add(%s.1, sum(%n)))) }}, ({xs}, {ys}), "
                f"({h.name}, 0f))",
                (),
                "tuple",
                pool=False,
            )
            self.bind(f"{r}.1.0", (3,), "float32")
            self.outputs += [f"{r}.0.1", f"{r}.1.1"]

    def whole(self, loop: str) -> str:
        """A loop's whole result, returned as well half of the time: its
        ``()`` part (a map's state, a scan's outputs) must be built then."""
        r = self.bind(loop, (), "tuple", pool=False, output=False)
        if self.chance(2):
            self.forced.append(r)
        return r

    def f_foreach_static(self) -> None:
        self.foreach("static")

    def f_foreach_symbolic(self) -> None:
        self.foreach("symbolic")

    def f_foreach_unknown(self) -> None:
        self.foreach("unknown")

    # ------------------------------------------------------------ while forms
    def f_while_no_outputs(self) -> None:
        h = self.pick((3,))
        state = f"(int32, {F3})"
        limit: int | str = self.c.integer(0, 8)
        if self.chance(2):  # known only at run time: partial evaluation cannot unroll it
            limit = self.param("int32", np.array(limit, np.int32), "n")
        cap = f", max_iterations={self.c.integer(0, 10)}" if self.chance(2) else ""
        r = self.whole(
            f"cf.while_loop(fn (%s: {state}) {{ less(%s.0, {limit}) }}, "
            f"fn (%s: {state}) {{ ((), (add(%s.0, 1), tanh(add(%s.1, 0.5f)))) }}, "
            f"(0, {h.name}){cap})"
        )
        self.bind(f"{r}.1.1", (3,), "float32")

    def f_while_tuple_outputs(self) -> None:
        h = self.pick((3,))
        state = f"(int32, {F3})"
        r = self.bind(
            f"cf.while_loop(fn (%s: {state}) {{ less(sum(%s.1), 4f) }}, "
            f"fn (%s: {state}) {{ let %y = add(%s.1, 0.75f); "
            f"((%y, %s.0), (add(%s.0, 1), %y)) }}, (0, {h.name}))",
            (),
            "tuple",
            pool=False,
        )
        self.bind(f"{r}.1.1", (3,), "float32")
        self.outputs += [f"{r}.0.0", f"{r}.0.1"]

    # ------------------------------------------------------------------ ADTs
    def f_adt_list(self, length: int | None = None) -> None:
        self.uses_list = True
        n = self.counter + 1
        lst = f"List[{F3}]"
        # Short lists step with tanh; a deep one (10,000 elements) with an
        # exact step, since 10,000 tanh of TVM's and numpy's, each within an
        # ulp, drift apart beyond 1e-5.
        step = "tanh(%x)" if length is None else "add(%x, 1f)"
        self.defs.append(
            f"def @build{n}(%n: int32, %x: {F3}) -> {lst} {{\n"
            f"  if (less_equal(%n, 0)) {{ Nil }} else "
            f"{{ Cons(%x, @build{n}(subtract(%n, 1), {step})) }}\n}}\n"
            f"def @fold{n}(%l: {lst}, %acc: {F3}) -> {F3} {{\n"
            f"  match (%l) {{ Cons(%h, %t) => @fold{n}(%t, add(%acc, %h)), Nil => %acc }}\n}}\n"
        )
        count = self.c.integer(0, 5) if length is None else length
        n_param = self.param("int32", np.array(count, np.int32), "n")
        x = self.pick((3,))
        self.bind(f"@fold{n}(@build{n}({n_param}, {x.name}), {x.name})", (3,), "float32")

    # ------------------------------------------------------ data-dependent shapes
    def f_mask_then_kernels(self) -> None:
        x = self.pick((4, 3))
        m = self.bind(f"boolean_mask({x.name}, greater({x.name}, 0f))", ("?",), "float32", False)
        k = self.bind(f"exp(tanh({m}))", ("?",), "float32", pool=False)
        self.bind(f"sum(multiply({k}, 2f))", (), "float32", pool=False)

    def f_mask_rows_dense(self) -> None:
        x = self.pick((4, 3))
        mask = f"greater(sum({x.name}, axis=[1]), 0f)"
        m = self.bind(f"boolean_mask({x.name}, {mask})", ("?", 3), "float32", pool=False)
        d = self.bind(f"nn.dense({m}, %x2)", ("?", 3), "float32", pool=False)
        self.bind(f"max(add({d}, 1f), axis=[1])", ("?",), "float32", pool=False)

    def f_masks_meet(self) -> None:
        """Two masks' counts in one kernel: numpy's broadcasting (checked at
        run time: counts that do not broadcast fail in both), sizes that
        are arithmetic on the counts, random numbers over a masked tensor."""
        x = self.pick((4, 3))
        rows = f"sum({x.name}, axis=[1])"
        low, high = self.choice(["-1f", "0f", "0.5f"]), self.choice(["-0.5f", "0f", "1f"])
        y = self.bind(f"boolean_mask({x.name}, greater({rows}, {low}))", ("?", 3), "float32", False)
        z = self.bind(f"boolean_mask({x.name}, less({rows}, {high}))", ("?", 3), "float32", False)
        expr, shape = self.choice(
            [
                (f"add({y}, {z})", ("?", 3)),
                (f"where(greater({y}, 0f), {y}, {z})", ("?", 3)),
                (f"concatenate(({y}, tanh({z})))", ("?", 3)),
                (f"reshape(tanh({z}), newshape=[-1])", ("?",)),
                (f"strided_slice({y}, begin=[1], end=[-1])", ("?", 3)),
                (f"split({z}, indices_or_sections=[1])", ()),
                (f"nn.dropout({y}, @rng, rate=0.5f)", ("?", 3)),
            ]
        )
        if not shape:  # a tuple of two pieces: the second's rows
            expr, shape = f"{expr}.1", ("?", 3)
        r = self.bind(expr, shape, "float32", pool=False)
        self.forced.append(self.bind(f"sum({r}, axis=[0])", shape[1:], "float32", pool=False))

    def f_argwhere(self) -> None:
        x = self.pick((4, 3))
        w = self.bind(f"argwhere(greater({x.name}, 0.5f))", ("?", 2), "int32", pool=False)
        self.bind(f"sum({w}, axis=[0])", (2,), "int32", pool=False)

    # ---------------------------------------------------------- error inputs
    def error_ints(self, dtype: str, zero_chance: int = 2) -> str:
        data = [self.int_draw(dtype) for _ in range(4)]
        if self.chance(zero_chance):
            data[self.c.integer(0, 3)] = 0
        return self.param(tensor_type((4,), dtype), np.array(data, dtype), "e")

    def f_err_divide(self) -> None:
        dtype = self.choice(INT_DTYPES)
        x, y = self.int_value(dtype), self.error_ints(dtype)
        self.forced.append(self.bind(f"divide({x.name}, {y})", (4,), dtype, pool=False))

    def f_err_power(self) -> None:
        dtype = self.choice(["int8", "int16", "int32", "int64"])
        x = self.int_value(dtype)
        exps = [self.c.integer(-1 if self.chance(2) else 0, 3) for _ in range(4)]
        e = self.param(tensor_type((4,), dtype), np.array(exps, dtype), "e")
        self.forced.append(self.bind(f"power({x.name}, {e})", (4,), dtype, pool=False))

    def f_err_take(self) -> None:
        x = self.pick((3,))
        bad = self.chance(2)
        idx = [self.c.integer(-2, 5) if bad else self.c.integer(0, 2) for _ in range(4)]
        i = self.param(tensor_type((4,), "int32"), np.array(idx, np.int32), "e")
        self.forced.append(
            self.bind(f'take({x.name}, {i}, axis=0, mode="fast")', (4,), "float32", pool=False)
        )

    def f_err_reshape(self) -> None:
        x = self.pick((4, 3))
        shape = self.choice([[3, 4], [2, -1], [12, 1], [5, 2], [-1, 5], [0, 3], [2, 3]])
        s = self.param(tensor_type((2,), "int64"), np.array(shape, np.int64), "e")
        r = self.bind(f"dyn.reshape({x.name}, {s})", ("?", "?"), "float32", pool=False)
        self.forced.append(self.bind(f"sum({r}, axis=[1])", ("?",), "float32", pool=False))

    def f_err_empty_axis(self) -> None:
        data = self.floats((3,))
        if self.chance(2):
            data = -np.abs(data) - 0.5  # the mask keeps nothing
        x = self.param(F3, data, "e")
        m = self.bind(f"boolean_mask({x}, greater({x}, 0f))", ("?",), "float32", pool=False)
        op = self.choice(["max", "min", "argmax", "take"])
        if op == "take":
            expr, dtype = f"take({m}, 0, axis=0)", "float32"
        else:
            expr, dtype = f"{op}({m}, axis=[0])", "int32" if op == "argmax" else "float32"
        self.forced.append(self.bind(expr, (), dtype, pool=False))

    def f_err_dyn_shape(self) -> None:
        shape = self.choice([[2, 3], [2, -3], [0, 1], [-1, 2]])
        s = self.param(tensor_type((2,), "int32"), np.array(shape, np.int32), "e")
        op = self.choice(["dyn.zeros", "dyn.ones"])
        z = self.bind(f"{op}({s})", ("?", "?"), "float32", pool=False)
        self.forced.append(self.bind(f"sum({z})", (), "float32", pool=False))

    def f_err_reshape_unknown(self) -> None:
        x = self.pick((4, 3))
        m = self.bind(f"boolean_mask({x.name}, greater({x.name}, 0f))", ("?",), "float32", False)
        newshape = self.choice(["[2, -1]", "[-1, 3]", "[-1]", "[3, 2]"])
        r = self.bind(f"reshape({m}, newshape={newshape})", (), "float32", pool=False)
        self.forced.append(self.bind(f"sum({r})", (), "float32", pool=False))


# One table: feature -> its fragments (methods of _Gen).
_FRAGMENTS: dict[str, list[Callable[[_Gen], None]]] = {
    "base": [
        _Gen.f_unary,
        _Gen.f_binary,
        _Gen.f_reduce,
        _Gen.f_dense,
        _Gen.f_transpose,
        _Gen.f_if,
        _Gen.f_loop,
        _Gen.f_dropout,
        _Gen.f_while,
        _Gen.f_mask,
    ],
    "int": [
        _Gen.f_int_arith,
        _Gen.f_int_arith,
        _Gen.f_int_unary,
        _Gen.f_int_divide,
        _Gen.f_int_cast,
        _Gen.f_int_compare,
    ],
    "keys_if": [
        _Gen.f_dropout_in_branch,
        _Gen.f_key_from_branch,
        _Gen.f_dropout_in_both,
        _Gen.f_match_tuple,
        _Gen.f_split_num,
        _Gen.f_dropouts_large,
    ],
    "foreach_forms": [_Gen.f_foreach_static],
    "foreach_symbolic": [_Gen.f_foreach_symbolic],
    "foreach_unknown": [_Gen.f_foreach_unknown],
    "while_forms": [_Gen.f_while_no_outputs, _Gen.f_while_tuple_outputs],
    "adt": [_Gen.f_adt_list],
    "dynamic": [
        _Gen.f_mask_then_kernels,
        _Gen.f_mask_rows_dense,
        _Gen.f_argwhere,
        _Gen.f_masks_meet,
    ],
    "errors": [
        _Gen.f_err_divide,
        _Gen.f_err_power,
        _Gen.f_err_take,
        _Gen.f_err_reshape,
        _Gen.f_err_empty_axis,
        _Gen.f_err_dyn_shape,
        _Gen.f_err_reshape_unknown,
    ],
    "deep": [],
}
from .widened import WIDENED_FRAGMENTS  # noqa: E402  (its fragments take a _Gen)

_FRAGMENTS.update(WIDENED_FRAGMENTS)
assert set(_FRAGMENTS) == set(FEATURES)
FRAGMENT_NAMES = [k.__name__.removeprefix("f_") for ks in _FRAGMENTS.values() for k in ks]


def check_features(features: Iterable[str]) -> frozenset[str]:
    features = frozenset(features)
    unknown = features - set(FEATURES)
    if unknown:
        raise ValueError(f"unknown fuzzer features {sorted(unknown)}; known: {sorted(FEATURES)}")
    return features


def fragment_named(name: str) -> tuple[str, Callable[[_Gen], None]]:
    """The feature and the method of fragment ``name`` (``f_<name>``)."""
    for feature, kinds in _FRAGMENTS.items():
        for kind in kinds:
            if kind.__name__ == f"f_{name}":
                return feature, kind
    raise ValueError(f"no fragment {name!r}; known: {FRAGMENT_NAMES}")


def generate(
    chooser: Chooser,
    features: Iterable[str],
    max_fragments: int = 7,
    min_fragments: int = 2,
    only: str | None = None,
) -> Program:
    """One program of ``min_fragments`` to ``max_fragments`` fragments drawn
    from ``features`` (``deep`` excepted: see ``generate_deep``), then the
    fragment named ``only`` when given (the smallest program that shows
    one class of defect)."""
    features = check_features(features)
    if not features - {"deep"} and only is None:
        raise ValueError("generate needs a feature other than 'deep'")
    gen = _Gen(chooser, features)
    return gen.build(chooser.integer(min_fragments, max_fragments), only)


# ---------------------------------------------------------------- the deep bucket


def _deep_recursion(gen: _Gen, depth: int) -> None:
    tail = gen.chance(2)
    step = "@rec(add(%x, 1f), subtract(%n, 1))"
    if not tail:  # a native stack frame per call, unless the backend avoids it
        step = "add(@rec(%x, subtract(%n, 1)), 0.5f)"
    gen.defs.append(
        f"def @rec(%x: {F3}, %n: int32) -> {F3} {{\n"
        f"  if (less_equal(%n, 0)) {{ %x }} else {{ {step} }}\n}}\n"
    )
    n = gen.param("int32", np.array(depth, np.int32), "n")
    gen.bind(f"@rec(%x3, {n})", (3,), "float32")


def _deep_while(gen: _Gen, depth: int) -> None:
    n = gen.param("int32", np.array(depth, np.int32), "n")
    state = f"(int32, {F3})"
    out = "()" if gen.chance(2) else "sum(%s.1)"
    r = gen.bind(
        f"cf.while_loop(fn (%s: {state}) {{ less(%s.0, {n}) }}, "
        f"fn (%s: {state}) {{ ({out}, (add(%s.0, 1), add(%s.1, 1f))) }}, (0, %x3))",
        (),
        "tuple",
        pool=False,
    )
    gen.bind(f"{r}.1.1", (3,), "float32")
    if out != "()":
        gen.outputs.append(f"{r}.0")


def _deep_foreach(gen: _Gen, depth: int) -> None:
    xs = gen.param(tensor_type(("n", 3), "float32"), gen.floats((depth, 3), 0.01), "s")
    step = "if (greater(sum(%xt), 0f)) { add(%xt, %h) } else { subtract(%h, %xt) }"
    r = gen.bind(
        f"cf.foreach(fn (%xt: {F3}, %h: {F3}) {{ let %y = {step}; (sum(%y), %y) }}, {xs}, %x3)",
        (),
        "tuple",
        pool=False,
    )
    gen.bind(f"{r}.1", (3,), "float32")
    gen.outputs.append(f"{r}.0")


def _deep_list(gen: _Gen, depth: int) -> None:
    gen.f_adt_list(length=depth)


_DEEP_KINDS: list[tuple[str, Callable[[_Gen, int], None]]] = [
    ("recursion", _deep_recursion),
    ("while", _deep_while),
    ("foreach", _deep_foreach),
    ("adt-list", _deep_list),
]


def generate_deep(
    chooser: Chooser, features: Iterable[str], depth: int | None = None, kind: str | None = None
) -> Program:
    """One deep program: a recursion, a while loop, a foreach or (with ``adt``)
    a list of ``depth`` steps (drawn from ``DEEP_DEPTHS`` when None), called
    once; ``kind`` names which (drawn when None)."""
    features = check_features(features)
    gen = _Gen(chooser, features)
    gen.float_inputs()
    kinds = [(k, f) for k, f in _DEEP_KINDS if k != "adt-list" or "adt" in features]
    name, deep = gen.choice(kinds) if kind is None else (kind, dict(_DEEP_KINDS)[kind])
    depth = depth if depth is not None else gen.choice(DEEP_DEPTHS)
    deep(gen, depth)
    gen.used.add("deep")
    gen.names.append(f"deep_{name}")
    program = gen.finish(steps=1)
    program.label = f"deep {name} {depth}"
    return program


def programs(
    seed: int,
    count: int,
    features: Iterable[str],
    deep_share: int = 0,
    max_fragments: int = 7,
) -> list[Program]:
    """``count`` programs from ``seed``: program ``i`` is a function of
    ``(seed, i)`` only, so any one can be regenerated alone. With ``deep`` in
    ``features`` one program in ``deep_share`` is a deep one."""
    features = check_features(features)
    result = []
    for i in range(count):
        chooser = RandomChooser(seed * 1_000_003 + i)
        if "deep" in features and deep_share and i % deep_share == deep_share - 1:
            program = generate_deep(chooser, features)
        else:
            program = generate(chooser, features, max_fragments, min(2, max_fragments))
        program.label = f"seed {seed} #{i}" + (f" ({program.label})" if program.label else "")
        result.append(program)
    return result


def one_fragment_programs(seed: int, per_fragment: int, features: Iterable[str]) -> list[Program]:
    """``per_fragment`` programs of exactly one fragment for each fragment of
    ``features``, and (with ``deep``) one deep program of each kind at
    10,000 steps: the smallest programs, so an outcome names its class."""
    features = check_features(features)
    result = []
    for feature in sorted(features - {"deep"}):
        for kind in dict.fromkeys(k.__name__.removeprefix("f_") for k in _FRAGMENTS[feature]):
            for i in range(per_fragment):
                chooser = RandomChooser(zlib.crc32(f"{seed} {kind} {i}".encode()))
                program = generate(chooser, [feature], 0, 0, only=kind)
                program.label = f"seed {seed} {kind} #{i}"
                result.append(program)
    if "deep" in features:
        for i, (name, _) in enumerate(_DEEP_KINDS):
            if name == "adt-list" and "adt" not in features:
                continue
            program = generate_deep(RandomChooser(seed + i), features, 10000, name)
            program.label = f"seed {seed} deep {name}"
            result.append(program)
    return result
