"""The pass infrastructure: requirements, verification naming the pass that
broke an invariant, instruments, contexts, the registry and pipelines."""

from __future__ import annotations

import gc
import io

import pytest

import effir
from effir.ir.expr import Call, Function, Let, TupleGetItem, Var
from effir.ir.module import IRModule
from effir.passes.infra.instruments import PrintIR, Timing
from effir.passes.infra.pipeline import STANDARD_PIPELINES, pipeline, run_pipeline
from effir.passes.infra.transform import (
    COLLECTOR_THRESHOLD,
    Pass,
    PassContext,
    PassError,
    Sequential,
    a2_problem,
    anf_problem,
    function_pass,
    lookup_pass,
    module_pass,
    register_pass,
)

A1 = """#[version = "0.0.5"]
global @rng: Ref[Key] = ref(random.key(0));
def @main(%x: Tensor[(4), float32]) {
  let %a = nn.dropout(%x, @rng);
  nn.dropout(add(%a, %a), @rng)
}
"""


def a1() -> IRModule:
    return effir.parse(A1)


def test_invariant_checkers():
    assert anf_problem(a1()) == "@main has a call with a compound argument"
    assert a2_problem(a1()) == "@main calls the effectful operator nn.dropout"
    a2 = run_pipeline(a1(), "state-passing")
    assert anf_problem(a2) is None and a2_problem(a2) is None


def test_an_unmet_requirement_names_the_pass_that_establishes_it():
    with pytest.raises(PassError, match="pass split-keys requires a state-passing program"):
        run_pipeline(a1(), "split-keys")
    # grad requires A2 (its prelude makes it) and preserves it: it is no maker of A2.
    with pytest.raises(PassError, match="; run state-passing first"):
        run_pipeline(a1(), "explicate,split-keys")
    run_pipeline(a1(), "state-passing,split-keys")


def _first_let_dropped(fn: Function) -> Function:
    body = fn.body
    return Function(fn.params, body.body if isinstance(body, Let) else body, None, (), fn.attrs)


def test_verification_names_the_pass_that_broke_the_types():
    breaking = function_pass(name="drop-first-let", register=False)(_first_let_dropped).effir_pass
    module = run_pipeline(a1(), "state-passing")
    with pytest.raises(PassError, match="pass drop-first-let produced an invalid program"):
        breaking(module, PassContext(verify=True))
    breaking(module, PassContext(verify=False))  # nothing checks: no error


def _reuse_the_sub_key(module: IRModule) -> IRModule:
    """Make the second dropout draw with the first one's key: well typed,
    but a key used twice."""
    fn = module["main"]
    keys: list[Var] = []
    expr = fn.body
    while isinstance(expr, Let):
        if isinstance(expr.value, TupleGetItem) and expr.value.index == 1:
            keys.append(expr.var)
        expr = expr.body

    class Swap(effir.ir.Mutator):
        @effir.ir.on(Call)
        def call(self, new, old):
            if getattr(new.callee, "name", "") == "random.dropout" and new.args[1] is keys[1]:
                return Call(new.callee, (new.args[0], keys[0]), new.attrs)
            return new

    return module.with_function("main", Swap().mutate(fn))


def _pass(name: str, transform, **declared) -> Pass:
    """A throwaway module pass of ``transform`` (not registered)."""
    return module_pass(name=name, register=False, **declared)(transform).effir_pass


def test_verification_names_the_pass_that_broke_linearity():
    module = run_pipeline(a1(), "state-passing")
    reuse = _pass("reuse-key", _reuse_the_sub_key)
    with pytest.raises(PassError, match="pass reuse-key broke linearity: key %sub_key"):
        reuse(module, PassContext())


NESTED = """#[version = "0.0.5"]
def @main(%x: Tensor[(4), float32]) { tanh(add(%x, %x)) }
"""


def _nested(module: IRModule) -> IRModule:
    """A well-typed program with a compound argument: not in A-normal form."""
    return effir.parse(NESTED)


def test_a_pass_that_does_not_establish_what_it_declares_is_named():
    flat = run_pipeline(effir.parse(NESTED), "to-anf")
    liar = _pass("claims-anf", _nested, establishes={"anf"})
    with pytest.raises(PassError) as caught:
        liar(flat, PassContext())
    message = str(caught.value)
    assert "pass claims-anf broke A-normal form, which it declares to establish: " in message
    assert "@main has a call with a compound argument" in message
    assert caught.value.span is not None and caught.value.span.source.name == __file__
    assert "def _nested(module: IRModule) -> IRModule:" in message  # where the pass is defined
    assert liar(flat, PassContext(verify=False)) is not flat  # unverified: no check


def test_a_pass_that_does_not_preserve_what_it_declares_is_named():
    flat = run_pipeline(effir.parse(NESTED), "to-anf")
    liar = _pass("keeps-anf", _nested, preserves={"anf"})
    with pytest.raises(PassError, match="pass keeps-anf broke A-normal form, which it declares "):
        liar(flat, PassContext())
    # The input was not in A-normal form: nothing was there to preserve.
    assert anf_problem(liar(effir.parse(NESTED), PassContext())) is not None


def test_user_key_reuse_is_not_blamed_on_a_pass():
    text = """#[version = "0.0.5"]
    global @rng: Ref[Key] = ref(random.key(0));
    def @main() {
      let %a = random.uniform(ref_read(@rng), shape=[2]);
      let %b = random.uniform(ref_read(@rng), shape=[2]);
      (%a, %b)
    }
    """
    a2 = run_pipeline(effir.parse(text), "state-passing")  # the A1 program reuses the key
    identity = _pass("identity", lambda m: m)
    identity(a2, PassContext())


def test_timing_and_print_after_change():
    timing, stream = Timing(), io.StringIO()
    context = PassContext(instruments=[timing, PrintIR("after-change", stream)])
    a2 = run_pipeline(a1(), "explicate,state-passing", context)
    _pass("identity", lambda m: m)(a2, context)
    assert [name for name, _ in timing.records] == ["explicate", "state-passing", "identity"]
    assert "total" in timing.table()
    printed = stream.getvalue()
    assert "// ----- after explicate -----" in printed
    assert "// ----- after state-passing -----" in printed
    assert "after identity" not in printed


def test_print_before_and_after():
    for when in ("before", "after"):
        stream = io.StringIO()
        run_pipeline(a1(), "to-anf", PassContext(instruments=[PrintIR(when, stream)]))
        assert f"// ----- {when} to-anf -----" in stream.getvalue()
    with pytest.raises(ValueError, match="before, after or after-change"):
        PrintIR("sometimes")


def test_the_current_context():
    timing = Timing()
    with PassContext(instruments=[timing]) as context:
        assert PassContext.current() is context
        pipeline("to-anf")(a1())
    assert PassContext.current() is not context
    assert [name for name, _ in timing.records] == ["to-anf"]


def test_pipelines_from_text():
    seq = pipeline(" explicate, state-passing ")
    assert isinstance(seq, Sequential)
    assert [p.name for p in seq] == ["explicate", "state-passing"]
    assert [p.name for p in pipeline("-O1")] == STANDARD_PIPELINES["O1"].split(",")
    assert list(pipeline("O0")) == []
    with pytest.raises(PassError, match="unknown pass 'nonsense' \\(known passes: "):
        pipeline("explicate,nonsense")
    with pytest.raises(PassError, match="empty pass name"):
        pipeline("explicate,,state-passing")


def test_the_registry_refuses_duplicates_and_unknown_invariants():
    with pytest.raises(ValueError, match="already registered"):
        register_pass(_pass("to-anf", lambda m: m))
    with pytest.raises(ValueError, match="unknown invariant 'sorted'"):
        register_pass(_pass("sorter", lambda m: m, requires=frozenset({"sorted"})))
    assert lookup_pass("state-passing").establishes == {"anf", "a2"}


def test_function_pass_keeps_an_unchanged_module():
    module = a1()
    assert function_pass(name="nothing", register=False)(lambda fn: fn).effir_pass(module) is module


def test_the_collector_is_paced_while_a_pass_runs_and_restored_after():
    seen = []

    def probe(module: IRModule) -> IRModule:
        seen.append(gc.get_threshold()[0])
        # A nested pass (a pass running others) keeps the pacing.
        _pass("inner", lambda m: (seen.append(gc.get_threshold()[0]), m)[1])(module)
        seen.append(gc.get_threshold()[0])
        return module

    before = gc.get_threshold()
    _pass("probe", probe)(effir.parse('#[version = "0.0.5"]\ndef @main() { 1 }'))
    assert seen == [COLLECTOR_THRESHOLD] * 3
    assert gc.get_threshold() == before
    # A pass that fails restores the thresholds too.
    with pytest.raises(ZeroDivisionError):
        _pass("failing", lambda m: 1 // 0)(effir.parse('#[version = "0.0.5"]\ndef @main() { 1 }'))
    assert gc.get_threshold() == before


def test_a_prelude_is_read_by_the_registered_pipeline_reader(monkeypatch):
    """transform.py runs a pass's prelude with the reader pipeline.py
    registers (pipeline.py builds on transform.py); without one, the run
    says so instead of failing on an empty table."""
    from effir.passes.infra import transform

    @transform.module_pass(name="t-needs-anf", requires=("anf",), prelude="to-anf", register=False)
    def needs_anf(module, context):
        return module

    nested = effir.parse(
        '#[version = "0.0.5"]\ndef @main(%x: Tensor[(2), float32]) { add(add(%x, %x), %x) }\n'
    )
    read = []
    registered = transform._PIPELINE_TEXT[0]
    monkeypatch.setattr(
        transform,
        "_PIPELINE_TEXT",
        [lambda text, name: read.append(name) or registered(text, name)],
    )
    needs_anf.effir_pass(nested)
    assert read == ["t-needs-anf's prelude"]
    monkeypatch.setattr(transform, "_PIPELINE_TEXT", [])
    with pytest.raises(PassError, match="no reader of pipeline text is registered"):
        needs_anf.effir_pass(nested)
