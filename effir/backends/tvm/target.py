"""TVM targets for this machine: TVM 0.27 rejects target strings with flags
(``"llvm -mcpu=..."``), and plain ``"llvm"`` compiles for generic x86-64,
3.5x slower than code for the host CPU (docs/backend.md, TVM_NOTES.md)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from functools import cache
from typing import Any

import tvm


@cache
def host_cpu() -> str:
    return str(tvm.target.codegen.llvm_get_system_cpu())


def llvm_target() -> Any:
    """The host CPU, with its vector extensions."""
    return tvm.target.Target({"kind": "llvm", "mcpu": host_cpu()})


def cuda_target(arch: str = "sm_90") -> Any:
    """CUDA for ``arch`` (an H100 is sm_90), with the host CPU as host."""
    return tvm.target.Target({"kind": "cuda", "arch": arch}, host=llvm_target())


def make_target(name: str | Any) -> Any:
    """``"llvm"`` or ``"cuda"`` (or a ``tvm.target.Target``) as a Target."""
    if isinstance(name, tvm.target.Target):
        return name
    if name == "llvm":
        return llvm_target()
    if name == "cuda":
        return cuda_target()
    raise ValueError(f'unknown target {name!r}: use "llvm" or "cuda"')


@contextlib.contextmanager
def building(target: Any) -> Iterator[None]:
    """Where effir builds code for ``target`` (``tvm.compile``,
    ``relax.build``): inside ``with target``, with TVM's TIR pipeline as
    the current PassContext configures it, less TIR's common-subexpression
    elimination. That pass skips the bodies of ``Let`` expressions when it
    counts and places an expression's binding, but then substitutes its
    variable inside them too: an index used inside a kernel's ``Let``
    expressions (the threefry rounds of ``random.dropout``, the [RULE LET]
    bindings of te_ops) and computed twice by a later statement was
    replaced before its binding, and the build failed ("variable cse_v1 has been
    used before definition", any dropout of 32 elements or more). LLVM and
    NVCC eliminate common subexpressions themselves, so nothing is lost."""
    current = tvm.transform.PassContext.current()
    config = {**current.config, "tirx.disable_cse_tir": True}
    with target, tvm.transform.PassContext(opt_level=current.opt_level, config=config):
        yield
