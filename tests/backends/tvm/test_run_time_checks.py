"""Run-time checks of compiled code (runtime/errors.py [RULE RUNTIME-CHECK]): one mechanism
for every target. Each kind of check (integer division by zero, ``take``
out of range, ``max``/``argmax`` of an empty axis, a negative integer
power, a bad reshape, the depth of recursion) raises the interpreter's
EvalError on LLVM, from ``effir.compile``'s module, from an ``effir.load``ed
artifact and from the C++ runner; for CUDA the same programs build, their
kernels compute the checks into an error-code output on the device, and the
VM tests it on the host (no TIR assert in device code)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import effir
from tests.support.isolated import run_isolated

HEADER = '#[version = "0.0.5"]\n'

CASES = {
    "divide": (
        "%x: Tensor[(4), int32], %y: Tensor[(4), int32]",
        "divide(%x, %y)",
        "np.array([1, 2, 3, 4], 'int32'), np.array([1, 0, 3, 1], 'int32')",
        "integer division by zero",
    ),
    "take": (
        "%x: Tensor[(4), int32], %y: Tensor[(3), int32]",
        'take(%x, %y, axis=0, mode="fast")',
        "np.array([1, 2, 3, 4], 'int32'), np.array([1, 7, 9], 'int32')",
        "index 7 is out of range for axis 0 of size 4",
    ),
    "max": (
        "%x: Tensor[(2, 0), float32]",
        "max(%x, axis=[1])",
        "np.zeros((2, 0), 'float32'),",
        "max of an empty axis",
    ),
    "argmax": (
        "%e: Tensor[(3), float32]",
        "argmax(boolean_mask(%e, greater(%e, 0f)), axis=[0])",
        "np.array([-1, -2, -3], 'float32'),",
        "argmax of an empty axis",
    ),
    "power": (
        "%x: Tensor[(4), int64], %y: Tensor[(4), int64]",
        "power(%x, %y)",
        "np.array([1, 2, 3, 4]), np.array([1, 2, -1, 1])",
        "integer power with a negative exponent",
    ),
    "reshape": (
        "%e: Tensor[(3), float32]",
        "reshape(boolean_mask(%e, greater(%e, 0f)), newshape=[2])",
        "np.array([1, -2, -3], 'float32'),",
        "cannot reshape 1 elements into shape (2)",
    ),
    # after a mask, the sizes the messages show are known at run time only
    "take_masked": (
        "%e: Tensor[(3), float32], %i: Tensor[(2), int32]",
        'take(boolean_mask(%e, greater(%e, 0f)), %i, axis=0, mode="fast")',
        "np.array([1, 2, -3], 'float32'), np.array([1, 7], 'int32')",
        "index 7 is out of range for axis 0 of size 2",
    ),
    # indices counted at run time: the check's shape has a run-time size
    "take_masked_indices": (
        "%x: Tensor[(4), float32], %i: Tensor[(3), int32]",
        'take(%x, boolean_mask(%i, greater(%i, 0)), axis=0, mode="fast")',
        "np.array([1, 2, 3, 4], 'float32'), np.array([1, -1, 7], 'int32')",
        "index 7 is out of range for axis 0 of size 4",
    ),
    "take_empty": (
        "%e: Tensor[(3), float32], %i: Tensor[(2), int32]",
        "take(boolean_mask(%e, greater(%e, 0f)), %i, axis=0)",
        "np.array([-1, -2, -3], 'float32'), np.array([1, 0], 'int32')",
        "cannot take from axis 0 of size 0",
    ),
    "batch_norm_train": (
        "%e: Tensor[(3, 2), float32], %m: Tensor[(3), bool], %g: Tensor[(2), float32]",
        "nn.batch_norm_train(boolean_mask(%e, %m), %g, %g, %g, %g)",
        "np.ones((3, 2), 'float32'), np.array([0, 1, 0], bool), np.ones(2, 'float32')",
        "expected more than 1 value per channel when training, got input of shape (1, 2)",
    ),
}

RECURSION = HEADER + (
    "def @count(%n: int32) -> float32 {\n"
    "  if (less_equal(%n, 0)) { 0f } else { add(@count(subtract(%n, 1)), 0.5f) }\n"
    "}\n"
    "def @main(%n: int32) { @count(%n) }\n"
)


def source(name: str) -> str:
    params, body, _, _ = CASES[name]
    return f"{HEADER}def @main({params}) {{\n  {body}\n}}\n"


def test_each_check_raises_the_interpreters_error_compiled_and_loaded(tmp_path: Path) -> None:
    """The same EvalError (kind, operator, message, location) from the
    interpreter, the compiled module and the exported, reloaded artifact;
    and right results where the check passes."""
    lines = ["import numpy as np, effir"]
    for k, (name, (_, body, args, message)) in enumerate(CASES.items()):
        op = body.split("(")[0]
        art = str(tmp_path / f"art{k}")
        lines += [
            f"m = effir.check(effir.parse({source(name)!r}, source_name='checks.effir'))",
            "c = effir.compile(m)",
            # every program exports, kernels after boolean_mask too (relax/symbolic.py)
            f"c.export({art!r}); loaded = effir.load({art!r})",
            f"args = ({args})",
            "got = []",
            "for f in (lambda: effir.interpret(m, *args), lambda: c(*args), lambda: loaded(*args)):",
            "    try:",
            "        f(); got.append('no error')",
            "    except Exception as e:",
            "        got.append(f'{type(e).__name__}: {e}')",
            f"assert got[0] == got[1] == got[2], ({name!r}, got)",
            f"assert got[0].startswith('EvalError: checks.effir:3:3') and {op + ': ' + message!r} in got[0], got",
        ]
    # checks that pass: the values are the interpreter's
    lines += [
        f"m = effir.check(effir.parse({source('divide')!r}))",
        "x, y = np.array([7, -7, 9, 5], 'int32'), np.array([2, 2, -3, 1], 'int32')",
        "assert np.array_equal(effir.compile(m)(x, y), effir.interpret(m, x, y))",
        f"m = effir.check(effir.parse({source('take')!r}))",
        "x, y = np.array([1, 2, 3, 4], 'int32'), np.array([3, 0, 2], 'int32')",
        "assert np.array_equal(effir.compile(m)(x, y), effir.interpret(m, x, y))",
        "print('ok')",
    ]
    run_isolated("\n".join(lines)).check()


def test_the_depth_of_recursion_is_checked_as_every_other_check() -> None:
    run_isolated(
        f"""
        import numpy as np, effir
        from effir.backends.tvm.relax import lower as relax_lower
        relax_lower.MAX_DEPTH = 50
        m = effir.check(effir.parse({RECURSION!r}, source_name="r.effir"))
        c = effir.compile(m)
        assert c(np.array(40, np.int32)) == np.float32(20.0)
        try:
            c(np.array(60, np.int32))
        except effir.EvalError as err:
            assert "count: recursion deeper than 50 nested calls" in str(err), err
            assert "r.effir:" in str(err), err
        else:
            raise AssertionError("no error")
        print("ok")
        """
    ).check()


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_the_cpp_runner_reports_each_check_as_the_interpreter(
    runner: Path,
    tmp_path: Path,
) -> None:
    for name in ("take", "power", "max", "take_masked"):
        module = effir.check(effir.parse(source(name), source_name="checks.effir"))
        args = eval(f"({CASES[name][2]})", {"np": np})
        with pytest.raises(effir.EvalError) as expected:
            effir.interpret(module, *args)
        effir.compile(module).export(tmp_path / name)
        inputs = []
        for i, a in enumerate(args):
            np.save(tmp_path / f"{name}{i}.npy", a)
            inputs.append(tmp_path / f"{name}{i}.npy")
        done = subprocess.run(
            [runner, tmp_path / name, *inputs], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 1, done.stderr
        assert str(expected.value) in done.stderr, done.stderr
        assert "[effir-site" not in done.stderr, done.stderr


STATIC = ("divide", "take", "max", "power")  # kernels of static shapes
MASKED = ("argmax", "reshape")  # kernels after boolean_mask


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_each_check_builds_for_cuda_with_its_check_on_the_device() -> None:
    """No GPU here: the programs build for CUDA, their kernels compile to
    PTX, every check is computed on the device into an error code the VM
    tests on the host, and no device code asserts."""

    def renamed(text: str, k: int) -> str:
        return text.replace("%x", f"%x{k}").replace("%y", f"%y{k}").replace("%e", f"%e{k}")

    params = ", ".join(renamed(CASES[name][0], k) for k, name in enumerate(STATIC))
    body = "\n".join(f"  let %r{k} = {renamed(CASES[n][1], k)};" for k, n in enumerate(STATIC))
    result = ", ".join(f"%r{k}" for k in range(len(STATIC)))
    text = f"{HEADER}def @main({params}) {{\n{body}\n  ({result})\n}}\n"
    compiled = effir.compile(effir.parse(text, source_name="cuda.effir"), target="cuda")
    (spec,) = compiled.specialisations.values()
    device = spec.source("cuda")
    assert "assert" not in device.lower()
    assert device.count("effir_error") >= len(STATIC)  # each kernel's error-code output
    host = spec.program.module.script()
    for name in STATIC:
        shown = CASES[name][3].replace("7", "<effir-value>")
        assert f"{name}: {shown}" in host, name
    assert host.count("R.tensor_to_shape") >= len(STATIC)
    assert host.count('"effir.check"') >= len(STATIC)
    assert ".entry" in spec.ptx()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_kernels_after_boolean_mask_check_on_cuda_too() -> None:
    """A reshape of a size known at run time (compiled for a symbolic size)
    and an argmax of an empty axis (a kernel built for that shape, as the
    per-shape fallback builds it): an error output, no assert, PTX."""
    import tvm
    from tvm import tirx

    from effir.backends.tvm.kernel.primitive import build_kernel, compile_cuda_to_ptx, lower_kernel
    from effir.backends.tvm.target import building, make_target

    def primitive(op: str) -> effir.ir.Function:
        return effir.parse(f"{HEADER}def @main(%v: Tensor[(n), float32]) {{ {op} }}\n")["main"]

    target = make_target("cuda")
    reshape = primitive("reshape(%v, newshape=[2])")
    lowered = lower_kernel(reshape, target, {"n": tirx.Var("n", "int64")})
    assert len(lowered.checks) == 1 and "reshape: cannot reshape" in lowered.checks[0]
    with building(target):
        executable = tvm.compile(lowered.module, target=target)
    source = str(executable.mod.imports[0].inspect_source(""))
    assert "effir_error" in source and "assert" not in source.lower()
    argmax = build_kernel(primitive("argmax(%v, axis=[0])"), "cuda", {"n": 0})
    assert len(argmax.checks) == 1 and "argmax of an empty axis" in argmax.checks[0]
    assert "effir_error" in argmax.source("cuda")
    assert ".entry" in compile_cuda_to_ptx(argmax)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_a_check_showing_two_run_time_values_builds_for_cuda() -> None:
    """take mode=fast after a mask shows the index and the axis's run-time
    size: the device's error output holds both, the VM tests it."""
    compiled = effir.compile(effir.parse(source("take_masked")), target="cuda")
    (spec,) = compiled.specialisations.values()
    host = spec.program.module.script()
    mark = "<effir-value>"
    assert f"take: index {mark} is out of range for axis 0 of size {mark}" in host
    assert "R.tensor_to_shape" in host and "error_value1" in host
    assert "assert" not in spec.source("cuda").lower()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_recursion_depth_is_checked_on_cuda_too() -> None:
    compiled = effir.compile(effir.parse(RECURSION, source_name="r.effir"), target="cuda")
    (spec,) = compiled.specialisations.values()
    host = spec.program.module.script()
    assert "count: recursion deeper than" in host and '"effir.check"' in host
    assert "assert" not in spec.source("cuda").lower()


def test_a_checked_operation_in_a_loop_body_fails_as_the_interpreter() -> None:
    """Found returning a value: a loop compiled into one kernel (a
    ``cf.foreach`` of symbolic length) skipped its body's checks; such a
    body now runs as a VM loop whose step kernels check."""
    run_isolated(
        f"""
        import numpy as np, effir
        text = {HEADER!r} + '''def @main(%xs: Tensor[(n, 2), int32], %y: Tensor[(2), int32]) {{
          cf.foreach(fn (%x: Tensor[(2), int32], %h: Tensor[(2), int32]) {{
            (%x, divide(add(%h, %x), %y))
          }}, %xs, %y)
        }}
        '''
        m = effir.check(effir.parse(text, source_name="loop.effir"))
        c = effir.compile(m)
        for y in ([1, 2], [1, 0]):
            args = (np.ones((3, 2), "int32"), np.array(y, "int32"))
            got = []
            for f in (lambda: effir.interpret(m, *args), lambda: c(*args)):
                try:
                    got.append(repr(f()))
                except effir.EvalError as err:
                    got.append(str(err))
            assert got[0] == got[1], got
        assert "divide: integer division by zero" in got[0], got
        print("ok")
        """
    ).check()
