"""explicate: effectful surface operators become explicit reads and writes
of their cells (A1).

``nn.dropout(%x, @rng, rate=r)`` reads the key in ``@rng``, splits it,
writes one half back and gives the other to the pure ``random.dropout``;
``nn.batch_norm(..., @bn, training=True)`` reads the running statistics,
runs the pure ``nn.batch_norm_train`` and writes the new statistics back
(``training=False`` reads only). Each operator's expansion is its
``explicate`` rule, defined beside it in ``effir/ops``; this pass knows no
operator names. The program is first put in A-normal form, so that each
expansion happens where the operator was evaluated, after its arguments.

The result evaluates exactly as the input: same values, same final state,
bit for bit (the surface operators' numpy rules are the same expansions).
"""

from __future__ import annotations

from ..ir.expr import Call, Op
from ..ir.module import IRModule
from ..ir.node import Node
from ..ir.op import op_def
from ..ir.visitor import ExprMutator
from .anf import to_anf


class _Explicate(ExprMutator):
    def visit_Call(self, new: Node, old: Node) -> Node:
        assert isinstance(new, Call)
        if isinstance(new.callee, Op):
            rule = op_def(new.callee).rules.get("explicate")
            if rule is not None:
                return rule(new)
        return new


def explicate(module: IRModule) -> IRModule:
    """Every surface effectful operator rewritten into A1 reads and writes."""
    module = to_anf(module)
    functions = {name: _Explicate().mutate(fn) for name, fn in module.functions.items()}
    return to_anf(IRModule(functions, module.type_defs, module.cells))
