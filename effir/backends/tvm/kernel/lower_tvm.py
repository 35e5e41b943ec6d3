"""lower-tvm: every pure operator call that TVM can compute and that fuse
left alone becomes a one-call primitive function, so that the executor
meets only primitive functions (kernels) and what TVM cannot compute.

``fuse`` groups the calls that should share a kernel; the rest (an opaque
operator such as ``nn.softmax``, a keyed ``random.*`` draw, a lone ``add``
between two effects) would otherwise run in numpy, one Python call each. A
call qualifies when its operator is pure, has a ``te`` rule (imported with
the backend), is neither control flow nor of data-dependent shape, its
arguments are variables or constants, and its arguments and result have
static types (tensors with integer or named dimensions, keys, tuples of
those; a named dimension is bound when the kernel is called). The
wrapper is what fuse builds: closed, typed, ``Primitive=1``, bound by a
``let`` right before its call, so the program stays in A-normal form.
Calls inside primitive functions are left alone (they are a kernel's body).
"""

from __future__ import annotations

from effir.passes.analyses.infer_type import check
from effir.passes.infra.transform import module_pass
from effir.passes.transforms.fuse import PRIMITIVE, is_primitive

from ....ir import type_tree
from ....ir.expr import Call, Constant, Expr, Function, Let, Op, Var
from ....ir.functor import Mutator, on, pre_order
from ....ir.module import IRModule
from ....ir.node import Node
from ....ir.op import op_def
from ....ir.types import ANY, KeyType, TensorType, Type


@module_pass(
    name="lower-tvm",
    requires={"anf"},
    preserves={"anf", "a2"},  # a pure call becomes a call of a one-call kernel
    doc="pure operator calls TVM can compute, outside fused groups, become one-call kernels",
)
def lower_tvm(module: IRModule) -> IRModule:
    """``module`` with each qualifying operator call wrapped (see above).
    The te rules (and TVM) are imported when the pass runs, not when it is
    registered: ``effir opt --list-passes`` imports no TVM."""
    from . import random_ops, te_ops  # noqa: F401  (the te rules)

    module = check(module)
    functions = {name: _Wrapper(fn).mutate(fn) for name, fn in module.functions.items()}
    return IRModule(functions, module.type_defs, module.cells)  # type: ignore[arg-type]


def static_type(t: Type) -> bool:
    """A type whose values have shapes known before the kernel runs: integer
    or named dimensions (a named one is bound by the arguments' shapes when
    the kernel is called), not ``?``."""
    return all(
        all(d != ANY for d in leaf.shape)
        if isinstance(leaf, TensorType)
        else isinstance(leaf, KeyType)
        for leaf in type_tree.leaves(t)
    )


def one_call_kernel(call: Call) -> tuple[Function, list[Var]]:
    """A primitive function computing ``call`` alone, and the variables it
    is called on: each variable argument becomes a parameter, constants
    stay in its body."""
    params: list[Var] = []
    operands: list[Var] = []
    args: list[Expr] = []
    for arg in call.args:
        if isinstance(arg, Var):
            param = Var(f"p{len(params)}", arg.checked_type)
            params.append(param)
            operands.append(arg)
            args.append(param)
        else:
            args.append(arg)
    body = Call(call.callee, tuple(args), call.attrs, span=call.span)
    fn = Function(tuple(params), body, call.checked_type, attrs=PRIMITIVE, span=call.span)
    return fn, operands


def wrappable(call: Call) -> bool:
    if not isinstance(call.callee, Op) or not call.has_type:
        return False
    definition = op_def(call.callee)
    if definition.effect != "pure" or "te" not in definition.rules:
        return False
    if definition.traits & {"control_flow", "dynamic_shape"}:
        return False
    for arg in call.args:
        if not isinstance(arg, Var | Constant) or not arg.has_type:
            return False
        if not static_type(arg.checked_type):
            return False
    return static_type(call.checked_type)


class _Wrapper(Mutator):
    """Calls and lets only: binders and types hold neither, and no hook
    rewrites them."""

    def __init__(self, root: Function) -> None:
        super().__init__()
        self.inside: set[int] = set()  # nodes of primitive functions' bodies
        for node in pre_order(root):
            if isinstance(node, Function) and is_primitive(node):
                self.inside.update(id(n) for n in pre_order(node.body))

    @on(Call)
    def call(self, new: Node, old: Node) -> Node:
        assert isinstance(new, Call) and isinstance(old, Call)
        if id(old) in self.inside or not wrappable(old):
            return new
        fn, operands = one_call_kernel(old)
        assert isinstance(old.callee, Op)
        fn_var = Var("kernel_" + old.callee.name.replace(".", "_"))
        return Let(fn_var, fn, Call(fn_var, tuple(operands), span=old.span), span=old.span)

    @on(Let)
    def let(self, new: Node, old: Node) -> Node:
        """Keep A-normal form: ``let %v = (let %k = fn; %k(...)); body``
        becomes ``let %k = fn; let %v = %k(...); body``."""
        assert isinstance(new, Let)
        value = new.value
        if (
            isinstance(value, Let)
            and isinstance(value.value, Function)
            and id(old) not in self.inside
        ):
            inner = Let(new.var, value.body, new.body, span=new.span)
            return Let(value.var, value.value, inner, span=value.span)
        return new
