"""``effir.compile_packed``: a module's scan compiled into one loop over a
packed batch (loop/cpu/packed.py), called with @main's parameters."""

from __future__ import annotations

from typing import Any

from effir.passes.analyses.infer_type import check

from ....ir.expr import Call, Function, Let, Op, TupleGetItem, Var
from ....ir.visitor import free_vars
from ....runtime.packed_scan import PackedScan, PackedScanError
from ..loop.cpu.packed import PackedLoop


def compile_packed(
    module: Any, target: Any = "llvm", *, parallel: bool = True, tile: int | None = None
) -> PackedScan:
    """effir.compile_packed (frontend/packed.py says what ``module`` must be
    and what the result takes): @main's loop found and checked, then
    compiled into a ``PackedLoop``."""
    if not isinstance(module, Function):
        module = check(module)["main"]
    main = module
    if len(main.params) < 2:
        raise PackedScanError("compile_packed: @main takes (%xs, %h0, captured...)", main.span)
    functions: dict[Var, Function] = {}
    bound: dict[Var, Any] = {}
    node = main.body
    while isinstance(node, Let):
        if isinstance(node.value, Function):
            functions[node.var] = node.value
        bound[node.var] = node.value
        node = node.body

    def loop_of(e: Any) -> Call | None:
        e = bound.get(e, e) if isinstance(e, Var) else e
        foreach = isinstance(e, Call) and isinstance(e.callee, Op) and e.callee.name == "cf.foreach"
        return e if foreach else None

    loop, both = loop_of(node), True
    if loop is None and isinstance(node, TupleGetItem) and node.index == 1:
        loop, both = loop_of(node.tuple_value), False
    if loop is None:
        raise PackedScanError(
            "compile_packed: @main must return a cf.foreach's result, or its final state "
            "(`.1`), as its let chain's last expression",
            main.span,
        )
    body_arg, xs_arg, init_arg = loop.args
    body = functions.get(body_arg) if isinstance(body_arg, Var) else body_arg
    if not isinstance(body, Function):
        raise PackedScanError("compile_packed: the loop body must be a function literal", loop.span)
    if xs_arg is not main.params[0] or init_arg is not main.params[1]:
        raise PackedScanError(
            "compile_packed: the loop must run over @main's first two parameters "
            "(the sequences, the initial state)",
            loop.span,
        )
    params = main.params[2:]
    captured = [v for v in free_vars(body) if v not in functions]
    for v in captured:
        if v not in params:
            raise PackedScanError(
                f"compile_packed: the loop body reads %{v.name_hint}, computed in @main: "
                "make it a parameter of @main",
                v.span,
            )
    packed = PackedLoop(body, captured, target, functions=functions, parallel=parallel, tile=tile)
    places = [captured.index(v) if v in captured else None for v in params]
    return _ParamOrder(packed, places, both)


class _ParamOrder(PackedScan):
    """A ``PackedLoop`` called with @main's parameters after ``%xs, %h0``:
    each goes to the loop's captured value it is (``None``: unused)."""

    def __init__(self, loop: Any, places: list[int | None], outputs: bool) -> None:
        self.loop, self.places, self.outputs = loop, places, outputs

    def _captured(self, values: tuple[Any, ...]) -> list[Any]:
        if len(values) != len(self.places):
            raise PackedScanError(
                f"packed_scan: @main takes {len(self.places)} value(s) after the sequences and "
                f"the initial state, got {len(values)}"
            )
        out: list[Any] = [None] * len(self.loop.captured)
        for place, value in zip(self.places, values, strict=True):
            if place is not None:
                out[place] = value
        return out

    def __call__(self, xs: Any, lengths: Any, h0: Any, *captured: Any, **options: Any) -> Any:
        options.setdefault("outputs", self.outputs)
        return self.loop(xs, lengths, h0, *self._captured(captured), **options)

    def run_packed(self, data: Any, batch_sizes: Any, h0: Any, *captured: Any) -> Any:
        """PyTorch's packed layout (``PackedLoop.run_packed``)."""
        return self.loop.run_packed(
            data, batch_sizes, h0, *self._captured(captured), outputs=self.outputs
        )

    @property
    def builds(self) -> int:
        return self.loop.builds
