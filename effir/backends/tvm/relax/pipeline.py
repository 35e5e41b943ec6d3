"""Relax's build pipeline as effir runs it: TVM's default lowering, with its
static memory planning kept to the block it plans.

Why
---
``StaticPlanBlockMemory`` (TVM 0.27) gives tensors whose lifetimes do not
overlap one storage. Its pool of free storages is one per function, not one
per block: a tensor allocated inside an ``If`` branch and dead before the
branch ends puts its storage back into that pool, and a later allocation
after the ``If`` (or in the other branch) takes it. The storage itself is
created (``memory.alloc_storage``) where the token is first used, inside the
branch, so the later ``alloc_tensor`` refers to a variable that is out of
scope: after ``KillAfterLastUse`` its register is null, and the VM crashes
in ``StorageObj::AllocTensor``. A key split inside a branch and split again
after it was enough.

What this module does
---------------------
[RULE PIPELINE-BRANCH] Before the planner runs, every ``builtin.alloc_tensor`` inside
an ``If`` branch (at any depth, so loop bodies and nested ``if``\\ s too) is
lowered as ``LowerAllocTensor`` would lower an unplanned one: a storage of
its own, then the tensor in it. The planner then sees only the allocations
of functions' top-level blocks, whose storages are in scope for the rest of
the function, and plans them as before. A branch's tensors are not shared
with each other; the VM's pooled allocator recycles their storage from one
call (or loop step) to the next, so this costs a pool lookup per tensor,
not a system allocation.

[RULE PIPELINE-ANYALIGN] Every TIR function of the module (the operators Relax
legalises, its shape functions) declares its parameters' buffers aligned
to their element size only, as effir's own kernels and loops do
(kernel/primitive.py ``relax_alignment``): TVM declares them 64-byte aligned, LLVM
then emits aligned vector moves, and an argument at another address
faults. So the caller passes every contiguous, writable numpy array
without a copy, whatever its address (runtime/signature.py ``to_tvm``). Before,
an argument not 64-byte aligned (numpy aligns to 16 bytes) was copied into
a fresh TVM tensor at every call, and what those copies cost depended on
what the process had allocated before: glibc serves a large block from
fresh pages (mmap, a page fault per 4 KiB) until a larger block has been
freed, which raises its mmap threshold. The GRU of benchmarks/gru_peers.py
at batch 1 ran in 1.5 ms when it was the first shape called and in 0.76
ms after a call at batch 32. Unaligned vector moves cost
nothing extra on aligned data.

[RULE PIPELINE-NOGRAPH] Relax's ``RewriteCUDAGraph`` is not run: it assumes a
function's planned storage may live for the VM's life, and a VM loop's
level function calls itself with tensors in that storage (docs/backend.md,
"CUDA graphs: not used, and why"; tests/backends/tvm/test_device_loops.py
keeps that reason checked).

[RULE PIPELINE-KILLUNUSED] After ``KillAfterLastUse``, every variable that is bound
to a value with a register of its own (a call, a tuple, a tuple item, an
``if``) holding memory and is never read is killed right after its
binding. The result of every ``SeqExpr`` (an ``If`` branch that binds
nothing too: ``if (c) { %x }``) is a read. ``KillAfterLastUse`` kills a
variable after its last read, so a variable never read was never killed:
Relax's own simplifications leave such bindings (a loop kernel's outputs
regrouped as the effir program's tuple, ``backward = (outputs, carry)``,
whose items are then read from the kernel's results directly), and the
register kept the tuple, and every tensor in it, until the function
returned. A compiled VM loop is a chain of calls (relax/loops.py: each
step calls the next), so each step's frame kept its step's tensors alive
until the whole loop ended: memory linear in the trip count that the
program does not hold. The checkpointed backward of a GRU
(benchmarks/checkpoint_memory.py, ``loop``) kept every segment's
recomputed residuals and so stored 12-13 (B, H) tensors per step instead
of about 3.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import tvm
from tvm import relax
from tvm.relax import transform
from tvm.relax.analysis import free_vars
from tvm.relax.expr import _update_type
from tvm.relax.op.vm import kill_object

from ....ir.trampoline import Computation
from ....ir.trampoline import run as drive
from ..kernel.primitive import relax_alignment

_ALLOC_TENSOR = tvm.ir.Op.get("relax.builtin.alloc_tensor")


def relax_pipeline(target: Any) -> Any:
    """TVM's default Relax lowering (``relax.get_pipeline("default")``)
    with [RULE PIPELINE-BRANCH] before the static memory planning; for a GPU, the
    small operators Relax legalises itself (the scalar arithmetic of loop
    counters, reshapes) get TVM's default GPU schedule (one thread per
    element), which every kernel needs there. effir's own kernels arrive
    scheduled."""
    gpu = target.kind.name != "llvm"
    passes = [relax.backend.DispatchSampling(), relax.backend.DispatchSortScan()] if not gpu else []
    passes.append(transform.LegalizeOps())
    if gpu:
        passes.append(tvm.s_tir.transform.DefaultGPUSchedule())
    passes += [
        transform.RewriteDataflowReshape(),
        transform.ToNonDataflow(),
        transform.RemovePurityChecking(),
        transform.CallTIRRewrite(),
        own_storage_in_branches(),
        transform.StaticPlanBlockMemory(),
        # [RULE PIPELINE-NOGRAPH] no RewriteCUDAGraph (TVM's default runs it, a no-op
        # unless configured): on effir's builds it lifts the storage of a
        # VM loop's steps, which call each other, into one allocation they
        # share (docs/backend.md, "CUDA graphs: not used, and why").
    ]
    passes += [
        transform.LowerAllocTensor(),
        transform.KillAfterLastUse(),
        kill_unused(),
        transform.LowerRuntimeBuiltin(),
        transform.ComputePrimValue(),
        transform.VMShapeLower(),
        transform.AttachGlobalSymbol(),
        any_alignment(),
    ]
    return tvm.transform.Sequential(passes)


def any_alignment() -> Any:
    """[RULE PIPELINE-ANYALIGN] as a module pass: every TIR function's parameters
    aligned to their element size only."""

    @tvm.transform.module_pass(opt_level=0, name="effir.AnyAlignment")
    def run(module: Any, _context: Any) -> Any:
        updates = {
            gv: relax_alignment(function)
            for gv, function in module.functions.items()
            if isinstance(function, tvm.tirx.PrimFunc)
        }
        for gv, function in updates.items():
            module[gv] = function
        return module

    return run


def own_storage_in_branches() -> Any:
    """[RULE PIPELINE-BRANCH] as a Relax module pass."""

    @tvm.transform.module_pass(opt_level=0, name="effir.OwnStorageInBranches")
    def run(module: Any, _context: Any) -> Any:
        normalizer = relax.BlockBuilder()
        for gv, function in list(module.functions.items()):
            if isinstance(function, relax.Function):
                module[gv] = rewrite_bindings(
                    function, lambda b, depth: _own_storage(b, depth, normalizer)
                )
        return module

    return run


def _own_storage(binding: Any, depth: int, normalizer: Any) -> list[Any]:
    """``x = alloc_tensor(shape, ...)`` inside a branch (``depth`` > 0): a
    storage of its own, then the tensor in it."""
    call = binding.value
    if depth == 0 or not isinstance(call, relax.Call) or not call.op.same_as(_ALLOC_TENSOR):
        return [binding]
    shape, dtype, device, scope = call.args
    element = tvm.DataType(dtype.value)
    nbytes: Any = tvm.tirx.const((element.bits * element.lanes + 7) // 8, "int64")
    for dim in shape.values:
        nbytes = nbytes * dim
    alloc = relax.op.memory.alloc_storage(relax.ShapeExpr([nbytes]), device, scope, "uint8")
    alloc = normalizer.normalize(alloc)
    storage = relax.Var("storage", alloc.ty)
    tensor = normalizer.normalize(relax.op.memory.alloc_tensor(storage, 0, shape, dtype, device))
    return [relax.VarBinding(storage, alloc), relax.VarBinding(binding.var, tensor)]


BindingRule = Callable[[Any, int], list[Any]]
"""What a binding (at a depth of ``If`` branches) becomes: bindings."""


def rewrite_bindings(function: Any, rule: BindingRule) -> Any:
    r"""``function`` with each binding replaced by ``rule(binding, depth)``,
    ``depth`` the number of ``If`` branches around it, the branches' own
    bindings rewritten first. Without recursion, Python's or TVM's: TVM's
    ``PyExprMutator`` calls back into Python once per nested ``If``, which
    hit Python's recursion limit near 250 nested ``If``s (effir's limit
    is ``MAX_NESTED_BLOCKS``, relax/builder.py). The rewritten nodes keep
    their types (``_update_type``): nothing here changes a value's type."""
    body = drive(_rewrite_seq(function.body, 0, rule))
    if body.same_as(function.body):
        return function
    return relax.Function(
        function.params, body, function.ret_ty, function.is_pure, function.attrs, function.span
    )


def _rewrite_seq(seq: Any, depth: int, rule: BindingRule) -> Computation[Any]:
    changed = False
    blocks = []
    for block in seq.blocks:
        bindings = []
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.If):
                then = yield _rewrite_seq(value.true_branch, depth + 1, rule)
                other = yield _rewrite_seq(value.false_branch, depth + 1, rule)
                if not (then.same_as(value.true_branch) and other.same_as(value.false_branch)):
                    branches = relax.If(value.cond, then, other, value.span)
                    _update_type(branches, value.ty)
                    binding = relax.VarBinding(binding.var, branches, binding.span)
                    changed = True
            replaced = rule(binding, depth)
            changed = changed or len(replaced) != 1 or not replaced[0].same_as(binding)
            bindings += replaced
        kind = relax.DataflowBlock if isinstance(block, relax.DataflowBlock) else relax.BindingBlock
        blocks.append(kind(bindings, block.span))
    if not changed:
        return seq
    new = relax.SeqExpr(blocks, seq.body, seq.span)
    _update_type(new, seq.ty)
    return new


def seqs_of(function: Any) -> Iterator[Any]:
    """Every ``SeqExpr`` of ``function``: its body and every ``If`` branch,
    at any depth, those without bindings too (an explicit stack, for the
    same reason as ``rewrite_bindings``)."""
    stack = [function.body]
    while stack:
        seq = stack.pop()
        yield seq
        for block in seq.blocks:
            for binding in block.bindings:
                if isinstance(binding.value, relax.If):
                    stack += [binding.value.false_branch, binding.value.true_branch]


def kill_unused() -> Any:
    """[RULE PIPELINE-KILLUNUSED] as a Relax module pass (after ``KillAfterLastUse``)."""

    @tvm.transform.module_pass(opt_level=0, name="effir.KillUnused")
    def run(module: Any, _context: Any) -> Any:
        normalizer = relax.BlockBuilder()
        for gv, function in list(module.functions.items()):
            if not isinstance(function, relax.Function):
                continue
            unused = _unused(function)
            if unused:
                module[gv] = rewrite_bindings(function, _killing(unused, normalizer))
        return module

    return run


# Values that the VM puts in a register of their own (a variable bound to a
# variable, a constant or a match_cast shares the register or needs none).
_OWN_REGISTER = (relax.Call, relax.Tuple, relax.TupleGetItem, relax.If)


def _holds_object(ty: Any) -> bool:
    """Whether a value of this type can keep memory alive (not a void
    result, not a shape or a primitive value)."""
    if isinstance(ty, relax.TupleType):
        return len(ty.fields) > 0
    return isinstance(ty, relax.TensorType | relax.ObjectType)


def _unused(function: Any) -> set[Any]:
    """The variables bound to a register of their own and never read.

    A ``SeqExpr``'s result is a read wherever the sequence is, one with no
    bindings too: ``if (c) { %x } else { ... }`` reads ``%x`` only as its
    branch's result. Found only through a sequence's bindings, such a
    branch was never walked, and ``%x`` was killed at its binding: the
    branch returned None (the ONNX importer's ``@seq_at``, a list's element
    returned by a branch)."""
    bound: list[Any] = []
    read: set[Any] = set()
    for seq in seqs_of(function):
        read.update(free_vars(seq.body))
        for block in seq.blocks:
            for binding in block.bindings:
                value = binding.value
                if isinstance(binding, relax.VarBinding) and isinstance(value, _OWN_REGISTER):
                    if _holds_object(binding.var.ty):
                        bound.append(binding.var)
                # An If's branches are sequences of their own (above); the
                # If itself reads its condition.
                read.update(free_vars(value.cond if isinstance(value, relax.If) else value))
    return {v for v in bound if v not in read}


def _killing(unused: set[Any], normalizer: Any) -> BindingRule:
    """The rule that follows each binding of ``unused`` with its ``kill_object``."""
    return lambda binding, _depth: _killed_after(binding, unused, normalizer)


def _killed_after(binding: Any, unused: set[Any], normalizer: Any) -> list[Any]:
    """The binding, then ``kill_object`` of its variable if it is never read."""
    if not isinstance(binding, relax.VarBinding) or binding.var not in unused:
        return [binding]
    kill = normalizer.normalize(kill_object(binding.var))
    return [binding, relax.VarBinding(relax.Var("kill", kill.ty), kill)]
