"""split-keys: a sequential chain of key splits becomes one split into a
tree of independent keys.

After explicate and state passing, each dropout of a block derives its key
from the one before it::

    (k1, s1) = split(k0); y1 = dropout(x1, s1)
    (k2, s2) = split(k1); y2 = dropout(x2, s2)      // k2 is the cell's new key

so the n-th random operator's key is n splits deep. This pass rewrites every
such chain of n >= 2 splits of one block into a single split::

    t = split(k0, num=n+1); s1 = t.1; s2 = t.2; k2 = t.0

Each sub-key then depends on the chain's first key only: the random
operators can be scheduled in any order or in parallel, and dead-code
elimination of one of them changes nothing else (it did not before either:
the chain's splits stay, because the cell's next key needs them).

What changes, exactly: the sub-keys of a rewritten chain and the key it
leaves behind (``t.0`` instead of the last split's first half), hence every
random value drawn from them and every value drawn later from the cell. What
stays bit-identical: everything else, including blocks whose chain has a
single split (a loop body doing one dropout per step is unchanged). To keep
every value of the A1 program, leave split-keys out of the pipeline: state
passing alone changes no value.

A chain is followed within one block (a let chain; a branch or a loop body
is a block of its own) through splits with ``num=2`` whose first half is used
only by the next split.
"""

from __future__ import annotations

from collections import Counter

from effir.ir.analysis import block_heads, use_counts
from effir.ir.block import Block
from effir.ir.builder import LetBuilder
from effir.ir.expr import Call, Expr, Function, Let, Op, TupleGetItem, Var
from effir.ir.functor import Mutator, on
from effir.ir.module import IRModule
from effir.ir.node import Attrs, Node
from effir.ir.op import op_def
from effir.passes.infra.transform import module_pass

_SPLIT = op_def("random.split")


@module_pass(
    name="split-keys",
    requires={"a2"},
    preserves={"a2", "anf"},  # splits stay bindings of one call
    doc="a chain of key splits in a block becomes one split (changes random values)",
)
def split_keys(module: IRModule) -> IRModule:
    """Every chain of two or more key splits in a block becomes one split."""
    functions = {name: _split_function(fn) for name, fn in module.functions.items()}
    return IRModule(functions, module.type_defs, module.cells)


def _split_function(fn: Function) -> Function:
    uses = use_counts(fn)
    return _Blocks(uses).mutate_as(fn, Function)


def _is_pair_split(value: Expr) -> bool:
    return (
        isinstance(value, Call)
        and isinstance(value.callee, Op)
        and value.callee.name == _SPLIT.name
        and value.attrs["num"] == 2
        and isinstance(value.args[0], Var)
    )


class _Blocks(Mutator):
    """Rewrites each block (a maximal let chain) once, at its head."""

    def __init__(self, uses: Counter) -> None:
        super().__init__()
        self.uses = uses
        self.heads: set[int] = set()

    def mutate(self, root: Node) -> Node:
        self.heads = block_heads(root)
        return super().mutate(root)

    @on(Let)
    def _let(self, new: Let, old: Let) -> Expr:
        if id(old) not in self.heads:
            return new
        return _rewrite_block(new, self.uses)


def _rewrite_block(head: Let, uses: Counter) -> Expr:
    block = Block.of(head)
    bindings = block.bindings()
    tail = block.tail
    splits = {var: i for i, (var, value) in enumerate(bindings) if _is_pair_split(value)}
    halves: dict[Var, dict[int, list[int]]] = {}  # split var -> index -> binding positions
    for i, (_, value) in enumerate(bindings):
        if isinstance(value, TupleGetItem) and value.tuple_value in splits:
            halves.setdefault(value.tuple_value, {}).setdefault(value.index, []).append(i)
    # The splits of each key, in binding order: looking a consumer up there
    # keeps the block linear (a scan of every split per split was quadratic).
    consumers: dict[Var, list[tuple[int, Var]]] = {}
    for other, j in splits.items():
        value = bindings[j][1]
        assert isinstance(value, Call) and isinstance(key := value.args[0], Var)
        consumers.setdefault(key, []).append((j, other))
    # next[s] = the split that consumes s's first half, and nothing else does.
    following: dict[Var, Var] = {}
    for var, i in splits.items():
        parts = halves.get(var, {})
        projections = sum(len(p) for p in parts.values())
        if uses[var] != projections or len(parts.get(0, ())) != 1:
            continue
        first = bindings[parts[0][0]][0]
        if uses[first] != 1:
            continue
        for j, other in consumers.get(first, ()):
            if j > i:
                following[var] = other
    starts = set(following) - set(following.values())
    if not starts:
        return head
    replaced: dict[int, tuple[Var, Expr] | None] = {}
    for start in starts:
        chain = [start]
        while chain[-1] in following:
            chain.append(following[chain[-1]])
        first_split = bindings[splits[start]][1]
        assert isinstance(first_split, Call)
        tree = Var("keys", span=first_split.span)
        attrs = Attrs({"num": len(chain) + 1})
        replaced[splits[start]] = (
            tree,
            Call(first_split.callee, first_split.args, attrs, span=first_split.span),
        )
        for position, split in enumerate(chain, start=1):
            if split is not start:
                replaced[splits[split]] = None
            for index, places in halves.get(split, {}).items():
                for place in places:
                    var, value = bindings[place]
                    if index == 0 and split is not chain[-1]:
                        replaced[place] = None  # consumed by the next split only
                    else:
                        new_index = position if index == 1 else 0
                        replaced[place] = (var, TupleGetItem(tree, new_index, span=value.span))
    b = LetBuilder()
    for i, original in enumerate(bindings):
        binding = replaced.get(i, original)
        if binding is not None:
            b.bind(*binding)
    return b.finish(tail)
