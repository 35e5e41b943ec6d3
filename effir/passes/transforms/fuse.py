"""fuse: operator fusion, as Relay's FuseOps.

Purpose
-------
A backend runs each operator call as one kernel that reads its inputs from
memory and writes its output back. A chain such as ``dense -> add -> relu``
then writes and re-reads two intermediate tensors for nothing: the bias add
and the activation could be applied to each output element of the product
while it is still in a register. ``fuse`` finds such groups of pure operator
calls in each basic block and makes each group one *primitive function*,
called where the group's result was bound:

    let %a = nn.dense(%x, %w);
    let %b = add(%a, %bias);
    nn.relu(%b)

becomes

    let %fused_nn_dense_add_nn_relu = fn (%p0: Tensor[(4, 8), float32],
        %p1: Tensor[(16, 8), float32], %p2: Tensor[(16), float32], Primitive=1)
        -> Tensor[(4, 16), float32] {
      let %a = nn.dense(%p0, %p1);
      let %b = add(%a, %p2);
      nn.relu(%b)
    };
    %fused_nn_dense_add_nn_relu(%x, %w, %bias)

A backend (the TVM lowering) compiles the body of each function marked
``Primitive=1`` as one kernel and runs everything else itself. The function
stands alone: it is closed (every tensor it reads is a parameter, constants
stay inside), its parameters carry their tensor types and its ``ret_type``
the result's, so the kernel's signature is known without the caller.
Parameters are in order of first use. The interpreter runs it as any other
closure, so the pass changes no value, bit for bit.

The rules (which calls may share a group)
-----------------------------------------
Decisions read the operator registry (effect kind and traits), never an
operator's name. Each call gets a *fusion kind* from its traits:

[RULE FUSE-KIND] ``elementwise``/``broadcast`` -> EW; ``injective`` -> INJ;
``reduction`` -> REDUCE; ``out_fusable`` (matmul-like: ``nn.dense``,
``nn.matmul``) -> OUT. A call is a *barrier* (never in a group) when its
operator is not ``pure`` (``random``/``state``/``io`` effects are never
moved), has an ``opaque``, ``dynamic_shape`` or ``control_flow`` trait, or
none of the four; calls of functions, closures and constructors, tuples,
projections, references, ``if``/``match`` and function literals are barriers
too. So are the keyed ``random.*`` operators of a state-passing program
(``opaque``). REDUCE and OUT are *anchors*: the expensive part of a kernel.

[RULE FUSE-STATIC] Only calls whose arguments are variables or constants and whose
arguments and result are tensors with known dimensions (integers or named
symbolic dimensions such as ``n``) are grouped. A ``?`` dimension comes from
a data-dependent operator; ``partition-dynamic`` isolates those, and a
kernel needs the relation between its shapes (two ``n`` are one size, two
``?`` are not). Tuple-valued operators (``split``) and operators taking a
tuple (``concatenate``, ``stack``) stay outside: a group's inputs and its
result are tensors.

[RULE FUSE-BLOCK] Groups never cross a basic block: a block is the let chain of a
function body, a branch, a clause, a closure or loop body (each is fused
separately). A use in a nested block, in a barrier, in a shared
(graph-form) expression or in the block's tail (unless the tail is the
group's own output) is a use *outside* the group.

[RULE FUSE-OUTPUT] A group has one output, its last member. Every other member's
value is used only by members of the same group, so nothing is computed
twice and nothing inside needs to be returned. A value used by two groups,
or by a group and anything outside, is the output of its own group.

[RULE FUSE-ANCHOR] At most one anchor per group (two reductions, or a product and a
reduction, are two kernels). An anchor takes:
- an *epilogue*: the members downstream of it must be EW (bias add,
  activation, scaling of a sum), applied to each output element as it is
  produced; an injective op after an anchor would re-index the anchor's
  output and is left to the next kernel, as Relay does. (Relay's FuseOps
  gives a reduction no epilogue; here it gets one, since an EW epilogue
  costs no extra pass over the reduction's input.) Anchors choose first,
  in block order: an anchor takes the chain of EW calls that consume its
  value one after the other before the rest is grouped, so that a later
  injective call cannot take them into a group the anchor may not join
  (Relay's phase 0, "so that conv2d always finishes fusing");
- *side inputs* of the epilogue: EW or INJ members that feed the epilogue
  and do not depend on the anchor (``add(dense(..), reshape(%b))``);
- a *prologue*: for a REDUCE anchor, EW/INJ members that compute its
  input (``sum(exp(%x))``): the reduction reads each input element once.
  An OUT anchor takes INJ members only (``nn.dense(transpose(%a),
  transpose(%b))``, the weight gradients autodiff makes): a matmul reads
  each input element many times, so fused arithmetic would be recomputed
  per read, while a re-indexing costs nothing per read, and a backend that
  copies an operand into its own layout before the product reads the
  original through it (the TVM backend's large products,
  schedule/cpu/gemm.py: the transposed matrix is never written);
- a call that feeds both the prologue and the epilogue
  (``divide(exp(%x), sum(exp(%x)))``) would be computed twice in the kernel
  (in the reduction's loop and in the epilogue's) or stored inside it:
  refused, as Relay's path rule refuses it; it stays a kernel of its own,
  computed once. (The group's *inputs* may be read on both sides:
  ``divide(%x, sum(%x))`` is one kernel.)

[RULE FUSE-NOANCHOR] Groups without an anchor: any mix of EW and INJ members.

[RULE FUSE-MAX] At most ``MAX_FUSED_OPS`` (256, Relay's ``max_depth``) members per
group, so that kernels stay of a size a backend schedules well.

Placement [RULE FUSE-PLACE]: the group's call replaces the binding of its output, the
last member, and the other members' bindings go. Every member's operands
are bound before the member, hence before the output: the call is in scope.
Only pure calls move, and only later, so the order of effects is unchanged.

Algorithm
---------
1. One walk per function: how many times each variable is used anywhere
   in it, and which nodes are shared. The rules read ``checked_type``, as
   cached by the last ``effir.check`` (a pipeline that verifies checks
   after each pass); when an operator call or a variable has none, the
   module is type-checked first.
2. Walk each function; a block's nested blocks (values and tail) are fused
   first; primitive functions are left as they are (fusing is idempotent:
   a group's call is a barrier the second time, and a primitive body is
   never fused again).
3. In each block, classify each binding (and the tail) by [RULE FUSE-KIND] [RULE FUSE-STATIC].
   First, in block order, each anchor takes its chain of EW consumers
   [RULE FUSE-ANCHOR]. Then walk the other candidates from the last to the first: a
   candidate joins its consumers' group when all its uses are by candidates
   of one group of this block [RULE FUSE-OUTPUT] [RULE FUSE-BLOCK] and the kinds allow it [RULE FUSE-ANCHOR] [RULE FUSE-NOANCHOR] [RULE FUSE-MAX]; otherwise it starts a group of which it is the output. Each
   candidate remembers its side (epilogue, anchor, prologue) and whether
   every path from it to the output is EW, so each decision is O(uses).
4. Rebuild the block: a group of one member stays a plain call; a larger one
   becomes ``let %fused_<ops> = fn (...) {...}; let %out = %fused_<ops>(...)``.

The pass is linear in the program's size; the walk is a ``Mutator`` of
``effir.ir.functor`` in its ``blocks`` mode (a block is rewritten once its
values and tail are): no Python recursion proportional to the program.

Known limitations: a group has one output (Relay's multi-output tuple groups
are not formed); an elementwise producer of two groups stays its own kernel
rather than being duplicated into both; a dead pure call (no use) is left
for ``dce``, not fused. Moving a pure call later moves where a run-time
failure of it happens (an integer division by zero fails after an output
printed between), as reordering pure code always does.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from effir.ir.analysis import operands, scan
from effir.ir.expr import Call, Constant, Expr, Function, Let, Op, Var
from effir.ir.functor import Mutator, before
from effir.ir.module import IRModule
from effir.ir.node import Attrs
from effir.ir.op import OpDef, op_def
from effir.ir.types import ANY, TensorType, Type
from effir.passes.analyses.infer_type import check
from effir.passes.infra.transform import Option, module_pass

MAX_FUSED_OPS = 256
"""Most operator calls in one group [RULE FUSE-MAX] (Relay's ``relay.FuseOps.max_depth``)."""

PRIMITIVE = Attrs((("Primitive", 1),))
"""The attributes of a fused function: a backend compiles it as one kernel."""

# Fusion kinds [RULE FUSE-KIND]; REDUCE and OUT are anchors.
EW, INJ, REDUCE, OUT = "elementwise", "injective", "reduction", "out_fusable"
_BARRIER_TRAITS = frozenset({"opaque", "dynamic_shape", "control_flow"})
# The side of an anchored group a member is on [RULE FUSE-ANCHOR]; groups without an
# anchor have only EPI members.
EPI, ANCHOR, PRO = "epilogue", "anchor", "prologue"
_NAME_LENGTH = 60  # longest fused-function name, cut at an operator boundary


def fusion_kind(definition: OpDef) -> str | None:
    """[RULE FUSE-KIND] The operator's fusion kind, or None for a barrier."""
    traits = definition.traits
    if definition.effect != "pure" or traits & _BARRIER_TRAITS:
        return None
    for kind in (OUT, REDUCE, INJ):
        if kind in traits:
            return kind
    if traits & {"elementwise", "broadcast"}:
        return EW
    return None


def is_primitive(fn: Function) -> bool:
    """A fused function (``Primitive=1``): a kernel, not a block to fuse."""
    return bool(fn.attrs.get("Primitive", 0))


@module_pass(
    name="fuse",
    requires={"anf"},
    preserves={"anf", "a2"},  # a group of pure calls becomes one call of a primitive
    doc="groups of pure operator calls in a block become one primitive function (a kernel)",
    options={"max_fused_ops": Option("most operator calls in one kernel", minimum=1)},
)
def fuse(module: IRModule, max_fused_ops: int = MAX_FUSED_OPS) -> IRModule:
    """``module`` with each group of fusable operator calls made one
    primitive function (the module itself when there is none)."""
    if max_fused_ops < 1:
        raise ValueError(f"fuse: max_fused_ops must be at least 1, got {max_fused_ops}")
    facts = {name: _Facts.of(fn) for name, fn in module.functions.items()}
    if any(f.untyped for f in facts.values()):
        check(module)
    functions = {}
    for name, fn in module.functions.items():
        fuser = _Fuser(facts[name].uses, facts[name].shared, max_fused_ops)
        functions[name] = fuser.mutate_as(fn, Function)
    if all(functions[n] is fn for n, fn in module.functions.items()):
        return module
    return IRModule(functions, module.type_defs, module.cells)


@dataclass
class _Facts:
    """What step 1 learns of one function in one walk: how many times each
    variable is used (not bound); the non-atomic nodes reached along more
    than one edge (shared, the text's graph form: evaluated once, so their
    uses count once and a block ends at one); and whether an operator call
    or a variable has no type yet."""

    uses: dict[Var, int]
    shared: set[int]
    untyped: bool

    @staticmethod
    def of(root: Function) -> _Facts:
        order, shared = scan(root)  # each compound node once: a shared node's uses count once
        uses: dict[Var, int] = {}
        untyped = False
        for node in order:
            if isinstance(node, Call) and isinstance(node.callee, Op) and not node.has_type:
                untyped = True
            for child in operands(node):
                if type(child) is Var:
                    uses[child] = uses.get(child, 0) + 1
                    untyped = untyped or not child.has_type
        return _Facts(uses, shared, untyped)


def _static(t: Type) -> bool:
    """[RULE FUSE-STATIC] A tensor whose every dimension is an integer or a name."""
    return isinstance(t, TensorType) and all(d != ANY for d in t.shape)


def _candidate_kind(expr: Expr) -> str | None:
    """[RULE FUSE-KIND] [RULE FUSE-STATIC] The fusion kind of ``expr`` if it may join a group."""
    if not isinstance(expr, Call) or not isinstance(expr.callee, Op) or not expr.has_type:
        return None
    kind = fusion_kind(op_def(expr.callee))
    if kind is None or not _static(expr.checked_type):
        return None
    for arg in expr.args:
        if isinstance(arg, Var):
            if not arg.has_type or not _static(arg.checked_type):
                return None
        elif not isinstance(arg, Constant):
            return None
    return kind


@dataclass
class _Group:
    """Members (indices into the block, output first, then backwards) and
    the kind of its anchor, if any."""

    members: list[int]
    anchor: str | None


@dataclass
class _Grouping:
    """The grouping of one block's candidates (step 3). Index ``i`` is the
    i-th binding, ``n`` the tail; ``users[i]`` are the candidates using
    binding i (once per use) and ``inside[i]`` says they are all its uses."""

    kinds: list[str | None]
    users: list[list[int]]
    inside: list[bool]
    max_fused_ops: int
    groups: list[_Group] = field(default_factory=list)
    group_of: dict[int, _Group] = field(default_factory=dict)
    side: dict[int, str] = field(default_factory=dict)
    clean: dict[int, bool] = field(default_factory=dict)  # all paths to the output are EW

    def epilogues(self) -> None:
        """[RULE FUSE-ANCHOR] Anchors first, in block order: each takes the chain of EW
        calls that consume its value one after the other (``dense -> add ->
        relu``), before an injective consumer further on could make a group
        that the anchor may no longer join (Relay's phase 0)."""
        for a, kind in enumerate(self.kinds):
            if kind not in (REDUCE, OUT) or a in self.group_of:
                continue
            chain, current = [a], a
            while self.inside[current] and len(chain) < self.max_fused_ops:
                consumer = self.users[current][0]
                if any(u != consumer for u in self.users[current]):
                    break  # a diamond: left to the backward walk
                if self.kinds[consumer] != EW or consumer in self.group_of:
                    break
                chain.append(consumer)
                current = consumer
            if len(chain) == 1:
                continue
            group = _Group(chain[::-1], kind)
            self.groups.append(group)
            for i in chain:
                self.group_of[i] = group
                self.side[i] = ANCHOR if i == a else EPI
                self.clean[i] = i != a

    def backwards(self) -> None:
        """[RULE FUSE-OUTPUT] [RULE FUSE-ANCHOR] [RULE FUSE-NOANCHOR] [RULE FUSE-MAX] From the last candidate to the first: join the
        one group all uses are in, when the kinds allow it; else start one."""
        for i in reversed(range(len(self.kinds))):
            kind = self.kinds[i]
            if kind is None or i in self.group_of:
                continue
            users = self.users[i]
            joined, where = None, None
            if self.inside[i]:
                targets = {id(self.group_of[u]): self.group_of[u] for u in users}
                if len(targets) == 1:
                    target = next(iter(targets.values()))
                    where = self._side(kind, target, users)
                    if where is not None and len(target.members) < self.max_fused_ops:
                        joined = target
                        target.members.append(i)
                        if where == ANCHOR:
                            target.anchor = kind
            if joined is None:  # the output of a group of its own
                joined = _Group([i], kind if kind in (REDUCE, OUT) else None)
                self.groups.append(joined)
                where = ANCHOR if joined.anchor else EPI
                self.clean[i] = kind == EW
            else:
                self.clean[i] = kind == EW and all(self.clean[u] for u in users)
            assert where is not None
            self.group_of[i] = joined
            self.side[i] = where

    def _side(self, kind: str, group: _Group, users: list[int]) -> str | None:
        """[RULE FUSE-ANCHOR] [RULE FUSE-NOANCHOR] The side of ``group`` a candidate of ``kind`` whose
        uses are ``users`` joins, or None when it may not join."""
        if kind in (REDUCE, OUT):
            if group.anchor is not None:
                return None  # one anchor per group
            # Every member so far comes later in the block: they become the
            # epilogue and its side inputs; the paths from here must be EW.
            return ANCHOR if all(self.clean[u] for u in users) else None
        if group.anchor is None:
            return EPI
        sides = {self.side[u] for u in users}
        if sides == {EPI}:
            return EPI  # a side input of the epilogue
        if EPI not in sides and (group.anchor == REDUCE or kind == INJ):
            return PRO
        return None  # feeds both sides, or arithmetic before a matmul-like anchor


class _Fuser(Mutator):
    """The walk of step 2-4: each block once its values and tail are
    rewritten (nested blocks first [RULE FUSE-BLOCK]); a kernel is never fused again."""

    blocks = True
    patterns = False

    def __init__(self, uses: dict[Var, int], shared: set[int], max_fused_ops: int) -> None:
        super().__init__()
        self.uses = uses
        self.shared = shared
        self.max_fused_ops = max_fused_ops

    def ends_block(self, let: Let) -> bool:
        return id(let) in self.shared

    @before(Function)
    def _kernel(self, fn: Function) -> Function | None:
        return fn if is_primitive(fn) else None

    # -------------------------------------------------------- one block
    def finish_block(self, chain: list[Let]) -> Expr:
        tail = chain[-1].body
        values = [self.child_expr(let.value) for let in chain]
        new_tail = self.child_expr(tail)

        exprs: list[Expr] = [let.value for let in chain] + [tail]
        kinds = [None if id(e) in self.shared else _candidate_kind(e) for e in exprs]
        for i, let in enumerate(chain):
            if not self.uses.get(let.var):
                kinds[i] = None  # dead: dce's business, not a kernel's
        groups = self._groups(chain, exprs, kinds)
        output = {g.members[0]: g for g in groups}
        fused = {i for g in groups for i in g.members[1:]}

        n = len(chain)
        if n in output:
            fn_var, fn, call = self._build(output[n], chain, exprs)
            body: Expr = Let(fn_var, fn, call, span=tail.span)
        else:
            body = new_tail
        for i in reversed(range(n)):
            let = chain[i]
            if i in fused:
                continue  # [RULE FUSE-PLACE] computed inside its group's function
            if i in output:
                fn_var, fn, call = self._build(output[i], chain, exprs)
                body = Let(fn_var, fn, Let(let.var, call, body, span=let.span), span=let.span)
            elif values[i] is not let.value or body is not let.body:
                body = dataclasses.replace(let, value=values[i], body=body)
            else:
                body = let
        return body

    def _groups(self, chain: list[Let], exprs: list[Expr], kinds: list[str | None]) -> list[_Group]:
        """Step 3: the groups of more than one member, each output first."""
        n = len(chain)
        index = {let.var: i for i, let in enumerate(chain)}
        users: list[list[int]] = [[] for _ in range(n + 1)]  # in-block candidate uses
        for j, expr in enumerate(exprs):
            if kinds[j] is not None and isinstance(expr, Call):
                for arg in expr.args:
                    i = index.get(arg) if isinstance(arg, Var) else None
                    if i is not None and i < j:
                        users[i].append(j)
        # Only uses by candidates of this block may be inside a group [RULE FUSE-OUTPUT] [RULE FUSE-BLOCK].
        inside = [
            i < n and bool(users[i]) and len(users[i]) == self.uses[chain[i].var]
            for i in range(n + 1)
        ]
        state = _Grouping(kinds, users, inside, self.max_fused_ops)
        state.epilogues()
        state.backwards()
        return [g for g in state.groups if len(g.members) > 1]

    # ------------------------------------------------------ the function
    def _build(
        self, group: _Group, chain: list[Let], exprs: list[Expr]
    ) -> tuple[Var, Function, Call]:
        """Step 4: the primitive function of ``group``, a variable for it,
        and the call of it that gives the group's output."""
        members = sorted(group.members)
        inner = {chain[m].var for m in members[:-1]}
        params: dict[Var, Var] = {}  # operand outside the group -> parameter
        calls: list[Call] = []
        for m in members:
            call = exprs[m]
            assert isinstance(call, Call)
            args = []
            for arg in call.args:
                if isinstance(arg, Var) and arg not in inner:
                    param = params.get(arg)
                    if param is None:
                        param = params[arg] = Var(f"p{len(params)}", arg.checked_type)
                    arg = param
                args.append(arg)
            calls.append(Call(call.callee, tuple(args), call.attrs, span=call.span))
        body: Expr = calls[-1]
        for m, call in zip(reversed(members[:-1]), reversed(calls[:-1]), strict=True):
            body = Let(chain[m].var, call, body, span=chain[m].span)
        output = exprs[members[-1]]
        fn = Function(
            tuple(params.values()), body, output.checked_type, attrs=PRIMITIVE, span=output.span
        )
        fn_var = Var(_name([c.callee for c in calls]))
        operands = tuple(params)  # in order of first use, as the parameters
        return fn_var, fn, Call(fn_var, operands, span=output.span)


def _name(callees: list[Expr]) -> str:
    """``fused_`` and the operators' names in order, as TVM names its
    kernels (a name only: no decision reads it)."""
    name = "fused"
    for callee in callees:
        assert isinstance(callee, Op)
        part = "_" + callee.name.replace(".", "_")
        if len(name) + len(part) > _NAME_LENGTH:
            break
        name += part
    return name


__all__ = ["MAX_FUSED_OPS", "PRIMITIVE", "fuse", "fusion_kind", "is_primitive"]
