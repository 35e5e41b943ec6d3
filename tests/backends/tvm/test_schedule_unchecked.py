"""effir's CPU schedules call TVM's schedule primitives without TVM's Python
type checks (schedule/unchecked.py [RULE SCHED-UNCHECKED]): the checks are
left out, the schedules are the same as with them, and TVM's own
``Schedule`` elsewhere in the process keeps them."""

from __future__ import annotations

import pytest
import tvm
import tvm_ffi
from tvm import s_tir

import effir
from effir.backends.tvm.kernel.primitive import lower_kernel
from effir.backends.tvm.schedule.cpu import kernel as cpu_kernel
from effir.backends.tvm.schedule.unchecked import unchecked_schedule
from effir.backends.tvm.target import make_target

HEADER = '#[version = "0.0.5"]\n'
KERNELS = [  # elementwise, a reduction, a matrix product, a gather: each schedule's steps
    "def @main(%x: Tensor[(64, 48), float32]) { tanh(%x) * 2f + %x }",
    "def @main(%x: Tensor[(32, 40), float32]) { nn.log_softmax(%x) }",
    "def @main(%x: Tensor[(32, 16), float32], %w: Tensor[(24, 16), float32]) "
    "{ nn.relu(nn.dense(%x, %w)) }",
    "def @main(%x: Tensor[(8, 32, 16), float32], %i: int32) { sum(take(%x, %i, axis=0), axis=[1]) }",
]


def _unscheduled(text: str) -> object:
    fn = effir.check(effir.parse(HEADER + text))["main"]
    return lower_kernel(fn, "llvm", schedule=False).module["main"]


def test_the_primitives_are_called_without_the_type_checks() -> None:
    """A wrong argument reaches TVM's C++ (an FFI error) instead of TVM's
    Python check, which names the primitive; TVM's own Schedule checks."""
    func = _unscheduled(KERNELS[0])
    with pytest.raises(TypeError, match='In "Schedule.get_sblock"'):
        s_tir.Schedule(func).get_sblock(42)
    with pytest.raises(Exception) as raised:
        unchecked_schedule(func).get_sblock(42)
    assert 'In "Schedule.get_sblock"' not in str(raised.value)


@pytest.mark.parametrize("text", KERNELS)
def test_the_schedules_are_the_checked_ones(text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    target = make_target("llvm")
    func = _unscheduled(text)
    unchecked = cpu_kernel.schedule_cpu(func, target)
    monkeypatch.setattr(cpu_kernel, "unchecked_schedule", s_tir.Schedule)
    checked = cpu_kernel.schedule_cpu(func, target)
    assert isinstance(unchecked, tvm.IRModule)
    assert tvm_ffi.structural_equal(unchecked, checked)
