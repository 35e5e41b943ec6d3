"""Common-subexpression elimination, effect-aware: a binding whose value
computes what an earlier binding in scope already computed becomes a use of
the earlier binding's variable.

Purpose
-------
After state passing the optimisable part of a program is pure, and the same
projection, tuple or operator call often appears several times (two layers
normalising the same input, a key projected twice). ``cse`` merges them:

    let %a = add(%x, %y);                 let %a = add(%x, %y);
    let %b = add(%x, %y);        =>       let %b = %a;
    multiply(%a, %b)                      multiply(%a, %a)

The later binding stays, as ``let %b = %a;`` with its variable (and span),
and every use of ``%b`` now names ``%a``: the alias is dead and ``dce``
removes it (``cse,dce``). Nothing else changes; unchanged subtrees keep
their identity, so a module without duplicates is returned as it is.

What is merged [RULE CSE-KEY]
-----------------------
Two values are the same computation when they have equal *keys*:

- a call of an operator whose registry effect kind is ``pure``: the
  operator, its attributes (``Attrs.__eq__``) and its arguments. The keyed
  ``random.*`` operators are pure: two draws with the same key and the same
  attributes are the same bits (that is the point of explicit keys), so
  they merge; draws with different keys do not. A ``control_flow`` operator
  (``cf.foreach``...) runs its bodies: it merges only where the call's
  inferred effects are pure, as below;
- a constructor call, a tuple, a projection ``%t.i``;
- a call of a function (a global function, or a closure held by a
  variable) whose inferred effects (``infer_effects``) at that call are
  ``pure`` and that reads, writes and allocates no reference, local ones
  included: a read may see a write made between the two calls, and each
  allocation is a different reference;
- a constant, compared by dtype, shape and bytes.

Arguments are compared after merging (``%b`` above counts as ``%a``, as does
a variable bound to another, ``let %c = %a;``), so chains of duplicates
merge in one pass; constants compare as above, globals and constructors by
name.

Never merged: a value whose type holds a ``Key`` [RULE CSE-LINEAR]. Two
``random.key(-2)`` are the same key, as two draws with one key are the same
bits, but a key is linear (docs/passes.md, "The linearity verifier"): each
of the two is consumed once, and merged, one key would be consumed twice,
which the pipeline's own linearity check rejects. A key made from other
keys (``random.split(%k)`` twice) uses its operand twice already, so
nothing worth merging is lost; draws (tensors) still merge. Nor
``ref(...)`` (two creations are two references), ``ref_read``
(a write may come between), ``ref_write``, operators whose kind is ``io``
(each output happens), ``random`` or ``state`` (``nn.dropout`` on a cell
advances it: two calls are two draws; ``nn.batch_norm`` on a cell likewise),
calls whose effects are not pure, ``fn`` literals (closures have no useful
equality), ``if``, ``match`` and ``let`` values, and values whose operands
are not atoms (run ``to-anf`` first to expose them).

Types: a merge must not change what later code may assume. Values whose
type their key does not determine (a constructor call without arguments,
``None``; a call of a polymorphic global function) merge only when both have
the same checked type; and a binding merges only into one whose variable has
the same type annotation (or both none), so a ``?`` in an annotation is
never replaced by a precise size or the reverse.

Where [RULE CSE-DOM]
--------------
The earlier binding must dominate the later one: in a let tree that is an
earlier binding of the same block or of an enclosing block (a closure body
sees its creator's bindings, a branch its enclosing block's), never a
sibling branch or clause. The table of keys is scoped accordingly: each
block (a let chain) adds its keys and removes them when it ends. A shared
sub-expression (graph form) is rewritten once for all its uses, so it sees
only the bindings it contains [RULE CSE-SHARED].

Known imprecisions: operands of commutative operators are not sorted
(``add(%x, %y)`` and ``add(%y, %x)`` stay apart); a call whose inferred
effects only read cells is not merged even when no write can come between.

Algorithm
---------
One walk in evaluation order, with the scoped table (a stack of variables
per key, each tagged with its block's depth), a substitution (merged
variable to the variable it merged into, valid wherever the merged one is in
scope, since the earlier binding dominates it) and a canonical-variable map
for keys. The walk is a ``Mutator`` of ``effir.ir.functor`` in its
``blocks`` mode: each block's values in order, each binding merged as it is
bound (``bind``), a block's keys removed when it ends (``finish_block``);
each node is visited once (a shared node once, its result reused), so the
pass is linear and uses no Python recursion proportional to the program.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable

from effir.ir.analysis import shared_nodes
from effir.ir.expr import (
    Call,
    Clause,
    Constant,
    Constructor,
    Expr,
    Function,
    GlobalVar,
    If,
    Let,
    Match,
    Op,
    RefCreate,
    RefRead,
    RefWrite,
    Tuple,
    TupleGetItem,
    Var,
)
from effir.ir.functor import Mutator, before
from effir.ir.module import IRModule
from effir.ir.node import Node
from effir.ir.op import op_def
from effir.ir.printer import astext
from effir.ir.structural import structural_equal
from effir.passes.analyses.infer_type import typed_if_possible
from effir.passes.analyses.key_types import KeyTypes
from effir.passes.infra.transform import module_pass
from effir.passes.transforms.dce import CallFacts


@module_pass(
    name="cse",
    preserves={"anf", "a2", "bbnf"},  # a binding's value becomes a variable in scope
    doc="merges repeated pure computations in scope",
)
def cse(module: IRModule) -> IRModule:
    """``module`` with repeated pure computations merged (the module itself
    if there are none). Values whose type is unknown (a module that does
    not type-check) are not merged: they could be keys [RULE CSE-LINEAR]."""
    module = typed_if_possible(module)
    facts = CallFacts(module)
    keys = KeyTypes(module)
    functions = {}
    for name, fn in module.functions.items():
        functions[name] = _Merger(module, facts, keys, shared_nodes(fn)).mutate_as(fn, Function)
    if all(functions[n] is fn for n, fn in module.functions.items()):
        return module
    return IRModule(functions, module.type_defs, module.cells)


_COMPOUND = (Call, Tuple, TupleGetItem, Function, If, Match, Clause, RefCreate, RefRead, RefWrite)
"""The nodes other than lets and atoms that may be shared."""


class _Merger(Mutator):
    """The walk: blocks in evaluation order (``blocks``), each binding
    merged as it is bound; a shared node opens a barrier [RULE CSE-SHARED]."""

    blocks = True
    patterns = False

    def __init__(
        self, module: IRModule, facts: CallFacts, keys: KeyTypes, shared: set[int]
    ) -> None:
        super().__init__()
        self.module = module
        self.facts = facts
        self.keys = keys
        self.shared = shared
        self.subst: dict[Var, Var] = {}  # merged variable -> the one it merged into
        self.canon: dict[Var, Var] = {}  # for keys: also plain aliases `let %c = %a`
        self.table: dict[Hashable, list[tuple[Var, int]]] = {}
        self.added: list[list[Hashable]] = []  # the keys each open block added
        self.values: dict[int, Expr] = {}  # a bound let's new value, by the let's id
        self.barrier = 0  # entries of blocks below this depth are not visible [RULE CSE-SHARED]
        self.barriers: list[int] = []  # the barriers the open shared nodes replaced

    # ----------------------------------------------------------- the walk
    def child(self, node: Node) -> Node:
        if type(node) is Var:
            return self.subst.get(node, node)
        return self.memo.get(id(node), node)

    def ends_block(self, let: Let) -> bool:
        return id(let) in self.shared

    def _open_barrier(self) -> None:
        self.barriers.append(self.barrier)
        self.barrier = len(self.added) + 1

    @before(*_COMPOUND)
    def _enter(self, node: Node) -> None:
        if id(node) in self.shared:
            self._open_barrier()

    def finish(self, node: Node) -> Node:
        new = super().finish(node)
        if id(node) in self.shared:
            self.barrier = self.barriers.pop()
        return new

    def start_block(self, chain: list[Let]) -> None:
        if id(chain[0]) in self.shared:
            self._open_barrier()
        self.added.append([])

    def bind(self, let: Let) -> None:
        self.values[id(let)] = self._merge(let, self.child_expr(let.value))

    def finish_block(self, chain: list[Let]) -> Node:
        for key in self.added.pop():
            stack = self.table[key]
            stack.pop()
            if not stack:
                del self.table[key]
        if id(chain[0]) in self.shared:
            self.barrier = self.barriers.pop()
        body = self.child_expr(chain[-1].body)
        values = self.values
        for let in reversed(chain):
            value = values.pop(id(let))
            if value is not let.value or body is not let.body:
                let = dataclasses.replace(let, value=value, body=body)
            body = let
        return body

    def _merge(self, let: Let, value: Expr) -> Expr:
        """[RULE CSE-KEY] ``let.var``'s new value: the variable of an earlier
        binding with the same key in scope, or ``value``."""
        var = let.var
        if isinstance(value, Var):
            self.canon[var] = self.canon.get(value, value)
            return value
        key = self._key(let.value, value)
        if key is None:
            return value
        stack = self.table.get(key)
        if stack and stack[-1][1] >= self.barrier:
            earlier = stack[-1][0]
            if _same_annotation(earlier, var):
                self.subst[var] = earlier
                self.canon[var] = earlier
                return earlier
            return value
        self.table.setdefault(key, []).append((var, len(self.added)))
        self.added[-1].append(key)
        return value

    # ----------------------------------------------------------- the keys
    def _key(self, original: Expr, value: Expr) -> Hashable | None:
        """[RULE CSE-KEY] what ``value`` computes, or None when it must not merge;
        ``original`` is the node effect inference saw."""
        if isinstance(value, Constant):
            return _constant_key(value)
        if isinstance(value, Tuple):
            fields = self._atom_keys(value.fields)
            return None if fields is None else ("tuple", fields)
        if isinstance(value, TupleGetItem):
            tuple_key = self._atom_key(value.tuple_value)
            return None if tuple_key is None else ("proj", tuple_key, value.index)
        if not isinstance(value, Call) or not isinstance(original, Call):
            return None
        if not original.has_type or self.keys.holds_key(original.checked_type):
            return None  # [RULE CSE-LINEAR]
        args = self._atom_keys(value.args)
        if args is None:
            return None
        callee = value.callee
        if isinstance(callee, Op):
            definition = op_def(callee)
            if definition.effect != "pure":
                return None
            if "control_flow" in definition.traits and not self.facts.mergeable(original):
                return None
            return ("op", definition.name, value.attrs, args)
        if isinstance(callee, Constructor):
            if not args:  # `None`: the type is not in the key
                return self._typed(("new", callee.adt, callee.name), original)
            return ("new", callee.adt, callee.name, args)
        if not isinstance(callee, Var | GlobalVar) or not self.facts.mergeable(original):
            return None
        if isinstance(callee, GlobalVar):
            fn = self.module.functions.get(callee.name)
            if fn is None:
                return None
            if fn.type_params:  # polymorphic: the type may not follow from the arguments
                return self._typed(("call", callee.name, args), original)
            return ("call", callee.name, args)
        return ("call", self.canon.get(callee, callee), args)

    def _typed(self, key: tuple, original: Expr) -> Hashable | None:
        if not original.has_type:
            return None
        return (*key, astext(original.checked_type))

    def _atom_keys(self, atoms: tuple[Expr, ...]) -> tuple | None:
        keys = []
        for atom in atoms:
            key = self._atom_key(atom)
            if key is None:
                return None
            keys.append(key)
        return tuple(keys)

    def _atom_key(self, atom: Expr) -> Hashable | None:
        if isinstance(atom, Var):  # itself: no other key equals a variable
            return self.canon.get(atom, atom)
        if isinstance(atom, Constant):
            return _constant_key(atom)
        if isinstance(atom, GlobalVar):
            return ("global", atom.name)
        if isinstance(atom, Constructor):
            return ("ctor", atom.adt, atom.name)
        return None  # an operator or a compound expression


def _constant_key(c: Constant) -> Hashable:
    return ("const", str(c.data.dtype), c.data.shape, c.data.tobytes())


def _same_annotation(a: Var, b: Var) -> bool:
    if a.type_annotation is None or b.type_annotation is None:
        return a.type_annotation is b.type_annotation
    return structural_equal(a.type_annotation, b.type_annotation)


__all__ = ["cse"]
