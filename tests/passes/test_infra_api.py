"""The public pass API (effir.transform): decorators that register passes
where they are defined, nestable sequences, options in pipeline text with
located errors, per-thread contexts, re-registration, and errors that
name the pass."""

from __future__ import annotations

import threading

import pytest

import effir
from effir.ir.expr import Call, Constant, Function, Let, Op
from effir.ir.module import IRModule
from effir.transform import (
    Instrument,
    Option,
    Pass,
    PassContext,
    PassError,
    RegistrationError,
    Sequential,
    function_pass,
    lookup_pass,
    module_pass,
    pipeline,
    registered_passes,
    standard_pipeline,
    unregister_pass,
)

A1 = """#[version = "0.0.5"]
global @rng: Ref[Key] = ref(random.key(0));
def @main(%x: Tensor[(4), float32]) {
  let %a = nn.dropout(%x, @rng);
  nn.dropout(add(%a, %a), @rng)
}
"""

ADD_ZERO = """#[version = "0.0.5"]
def @main(%x: Tensor[(4), float32]) {
  let %y = add(%x, 0f);
  multiply(%y, %y)
}
"""


@pytest.fixture
def scratch():
    """Names of the passes a test registers, unregistered after it."""
    names: list[str] = []
    yield names
    for name in names:
        unregister_pass(name)


def test_the_api_is_public_at_top_level():
    assert effir.Pass is Pass and effir.PassContext is PassContext
    assert effir.Sequential is Sequential and effir.pipeline is pipeline
    assert effir.module_pass is module_pass and effir.function_pass is function_pass
    assert effir.transform.lookup_pass("dce").name == "dce"


def test_every_built_in_pass_is_registered_the_tvm_lowering_included():
    names = set(registered_passes())
    assert {"to-anf", "explicate", "state-passing", "fuse", "dce", "lower-tvm"} <= names
    # Registered by the decorator on the pass's own function, where it is defined.
    assert lookup_pass("fuse").defined_at == "effir.passes.transforms.fuse.fuse"
    assert lookup_pass("lower-tvm").defined_at == "effir.backends.tvm.kernel.lower_tvm.lower_tvm"
    assert [o.text_name for o in lookup_pass("fuse").options] == ["max-fused-ops"]


def test_a_function_pass_sees_the_function_the_module_and_the_context(scratch):
    seen = []

    @function_pass(name="drop-add-zero", requires={"anf"})
    def drop_add_zero(fn: Function, module: IRModule, context: PassContext) -> Function:
        """Replaces add(x, 0f) by x."""
        seen.append((type(module).__name__, context.verify))

        class Rewrite(effir.ir.Mutator):
            @effir.ir.on(Call)
            def call(self, new, old):
                zero = isinstance(new.args[-1], Constant) and not new.args[-1].data.any()
                if isinstance(new.callee, Op) and new.callee.name == "add" and zero:
                    return new.args[0]
                return new

        return Rewrite().mutate(fn)

    scratch.append("drop-add-zero")
    assert drop_add_zero.effir_pass is lookup_pass("drop-add-zero")
    assert lookup_pass("drop-add-zero").doc == "Replaces add(x, 0f) by x."
    out = pipeline("to-anf,drop-add-zero,dce")(effir.parse(ADD_ZERO), PassContext(verify=True))
    assert "add" not in effir.astext(out)
    assert seen == [("IRModule", True)]


def test_a_module_pass_may_take_the_context_and_options(scratch):
    seen = []

    @module_pass(name="probe", options={"times": Option("how often", minimum=1)})
    def probe(module: IRModule, context: PassContext, times: int = 1, tag: str = "x") -> IRModule:
        seen.append((context.opt_level, times, tag))
        return module

    scratch.append("probe")
    module = effir.parse(ADD_ZERO)
    pipeline("probe")(module)
    pipeline("probe{times=3 tag=hello}")(module)
    pipeline("probe{times=4, tag=b}")(module, PassContext(opt_level=1))
    with PassContext(options={"probe": {"times": 7, "tag": "c"}}):
        pipeline("probe{tag=text-wins}")(module)
    assert seen == [(2, 1, "x"), (2, 3, "hello"), (1, 4, "b"), (2, 7, "text-wins")]
    assert lookup_pass("probe").with_options(times=2).spelled() == "probe{times=2}"
    with pytest.raises(PassError, match="option times of pass probe: must be at least 1"):
        lookup_pass("probe").with_options(times=0)


def _error(text: str) -> PassError:
    with pytest.raises(PassError) as info:
        pipeline(text)
    return info.value


def test_options_in_pipeline_text_are_validated_with_a_location():
    seq = pipeline("partial-eval, fuse{max-fused-ops=32}, fold-constant{max-elements=8}")
    assert seq.spelled() == "partial-eval,fuse{max-fused-ops=32},fold-constant{max-elements=8}"
    assert dict(seq.passes[1].values) == {"max_fused_ops": 32}

    unknown_pass = _error("explicate,fusee{max-fused-ops=2}")
    assert unknown_pass.message.startswith("unknown pass 'fusee'")
    assert (unknown_pass.line, unknown_pass.column) == (1, 11)
    assert "did you mean fuse?" in str(unknown_pass)

    unknown_option = _error("fuse{max-ops=2}")
    assert (
        unknown_option.message == "pass fuse has no option 'max-ops' (its options: max-fused-ops)"
    )
    assert unknown_option.column == 6

    bad_value = _error("dce,fuse{max-fused-ops=many}")
    assert bad_value.message == "option max-fused-ops of pass fuse: expected an integer, got 'many'"
    assert bad_value.column == 24
    assert "^~~~" in str(bad_value)  # the caret under the value

    too_small = _error("fuse{max-fused-ops=0}")
    assert "must be at least 1" in too_small.message
    assert "must be at least 0" in _error("partial-eval{fuel=-1}").message

    assert "unclosed '{'" in _error("fuse{max-fused-ops=2").message
    assert "expected '='" in _error("fuse{max-fused-ops}").message
    assert "takes no options" in _error("O1{x=1}").message
    assert "expected ',' between passes" in _error("dce cse").message


def test_sequential_nests_and_derives_its_requirements_and_guarantees():
    effects = Sequential(["explicate", "state-passing"], name="effects")
    assert effects.requires == frozenset() and effects.establishes == {"anf", "a2"}
    keys = Sequential([lookup_pass("split-keys")])
    assert keys.requires == {"a2"}
    whole = Sequential([effects, keys, "dce"])  # was AttributeError 'requires'
    assert whole.requires == frozenset()
    out = whole(effir.parse(A1), PassContext(verify=True))
    assert effir.transform.INVARIANTS["a2"](out) is None
    # Its members' requirements are checked before any runs, naming the member.
    with pytest.raises(PassError, match="pass split-keys requires a state-passing program"):
        Sequential([keys, effects])(effir.parse(A1))
    keeps_nothing = module_pass(name="keeps-nothing", register=False)(lambda m: m).effir_pass
    assert Sequential([pipeline("O1"), keeps_nothing]).establishes == frozenset()  # keeps none
    # Every built-in pass declares what it preserves: the standard pipelines establish.
    assert pipeline("O1,split-keys").establishes == {"anf", "a2"}
    assert pipeline("O2").establishes == {"anf", "a2"}


def _first_let_dropped(fn: Function) -> Function:
    body = fn.body
    return Function(fn.params, body.body if isinstance(body, Let) else body, None, (), fn.attrs)


def test_contexts_are_per_thread():
    """Two threads inside different contexts at once: each sees its own, and
    a context entered in one never leaks into the other."""
    barrier = threading.Barrier(2, timeout=60)
    seen: dict[str, object] = {}
    errors: list[BaseException] = []
    breaking = function_pass(name="drop-first-let", register=False)(_first_let_dropped).effir_pass

    def worker(verify: bool) -> None:
        try:
            with PassContext(verify=verify) as context:
                barrier.wait()  # both contexts are entered now
                seen[f"same-{verify}"] = PassContext.current() is context
                module = pipeline("state-passing")(effir.parse(A1))
                try:
                    breaking(module)
                    seen[f"raised-{verify}"] = False
                except PassError:
                    seen[f"raised-{verify}"] = True
                barrier.wait()
        except BaseException as err:  # reported below
            errors.append(err)

    threads = [threading.Thread(target=worker, args=(v,)) for v in (True, False)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert seen == {
        "same-True": True,
        "same-False": True,
        "raised-True": True,
        "raised-False": False,
    }
    assert PassContext.current().instruments == []  # this thread entered none


def test_re_registering_from_the_same_definition_replaces_it(scratch):
    scratch.append("rerun")
    for version in (1, 2):  # a notebook cell run twice: same module and qualified name

        @module_pass(name="rerun", doc=f"version {version}")
        def rerun(module: IRModule) -> IRModule:
            return module

    assert lookup_pass("rerun").doc == "version 2"

    def other(module: IRModule) -> IRModule:
        return module

    with pytest.raises(RegistrationError) as info:
        module_pass(other, name="rerun")
    message = info.value.message
    assert (
        "test_infra_api.test_re_registering_from_the_same_definition_replaces_it.<locals>.rerun"
        in message
    )
    assert "<locals>.other defines another pass" in message
    with pytest.raises(
        RegistrationError, match="already registered, by effir.passes.transforms.dce.dce"
    ):
        module_pass(other, name="dce")


def test_a_pass_that_returns_no_module_is_an_error_naming_it():
    forgetful = module_pass(name="forgetful", register=False)(lambda module: None).effir_pass
    with pytest.raises(PassError, match="pass forgetful returned None, not an IRModule"):
        forgetful(effir.parse(ADD_ZERO))
    bad_function = function_pass(name="bad-function", register=False)(lambda fn: fn.body).effir_pass
    with pytest.raises(PassError, match="pass bad-function returned Let for @main, not a Function"):
        bad_function(effir.parse(ADD_ZERO))
    with pytest.raises(PassError, match="pass dce was given a str, not an IRModule"):
        lookup_pass("dce")("def @main() { 1 }")


def test_a_user_instrument_sees_every_pass_of_nested_sequences():
    class Names(Instrument):
        needs_changed = False

        def __init__(self) -> None:
            self.names: list[str] = []

        def after(self, p, module, changed, seconds):
            self.names.append(p.spelled())

    names = Names()
    inner = Sequential(["explicate", "state-passing"])
    Sequential([inner, "fuse{max-fused-ops=4}"])(effir.parse(A1), PassContext(instruments=[names]))
    assert names.names == ["explicate", "state-passing", "fuse{max-fused-ops=4}"]


def test_opt_level_selects_the_standard_pipeline():
    assert standard_pipeline(1).spelled() == "explicate,state-passing"
    with PassContext(opt_level=1):
        assert pipeline().spelled() == "explicate,state-passing"
    assert len(pipeline()) == 6  # the default context: O2
    with pytest.raises(PassError, match="opt_level must be 0, 1 or 2, not 3"):
        PassContext(opt_level=3)


def test_an_option_must_have_a_default(scratch):
    def needs(module: IRModule, context: PassContext, extra) -> IRModule:
        return module

    with pytest.raises(PassError, match="parameter 'extra' needs a default"):
        module_pass(needs, name="needs")
    with pytest.raises(PassError, match="options= names nothing_here"):
        module_pass(lambda m: m, name="nothing", options={"nothing_here": "?"})


def test_a_call_of_an_op_pass_keeps_types_checked_under_verify(scratch):
    @module_pass(name="wrong-type")
    def wrong_type(module: IRModule) -> IRModule:
        fn = module["main"]
        return module.with_function("main", Function(fn.params, fn.params[0], fn.ret_type))

    scratch.append("wrong-type")
    module = effir.parse('#[version = "0.0.5"]\ndef @main(%x: int32) -> float32 { 1f }')
    with pytest.raises(PassError, match="pass wrong-type produced an invalid program"):
        pipeline("wrong-type")(module, PassContext(verify=True))


def test_what_a_pass_function_receives_follows_its_parameters(scratch):
    seen: list[tuple[str, ...]] = []

    @function_pass(name="fn-context")
    def fn_context(fn: Function, context: PassContext) -> Function:
        seen.append(("fn-context", type(fn).__name__, type(context).__name__))
        return fn

    @function_pass(name="fn-module")
    def fn_module(fn: Function, module: IRModule, *, context: PassContext) -> Function:
        seen.append(("fn-module", type(module).__name__, type(context).__name__))
        return fn

    @module_pass(name="mod-keyword")
    def mod_keyword(module: IRModule, *, context: PassContext, level: int = 1) -> IRModule:
        seen.append(("mod-keyword", type(context).__name__, str(level)))
        return module

    scratch += ["fn-context", "fn-module", "mod-keyword"]
    pipeline("fn-context,fn-module,mod-keyword{level=3}")(effir.parse(ADD_ZERO))
    assert seen == [
        ("fn-context", "Function", "PassContext"),
        ("fn-module", "IRModule", "PassContext"),
        ("mod-keyword", "PassContext", "3"),
    ]


def test_partial_eval_fuel_bounds_what_inlining_may_add():
    """``partial-eval{fuel=N}``: with no fuel a known call is not inlined;
    the default (ten times the input's size) inlines it."""
    text = """#[version = "0.0.5"]
def @double(%x: Tensor[(2), float32]) -> Tensor[(2), float32] { add(%x, %x) }
def @main(%y: Tensor[(2), float32]) -> Tensor[(2), float32] { @double(%y) }
"""
    calls = lambda m: sum(  # noqa: E731
        1 for n in effir.ir.functor.pre_order(m["main"]) if type(n).__name__ == "GlobalVar"
    )
    assert calls(pipeline("partial-eval")(effir.parse(text))) == 0
    assert calls(pipeline("partial-eval{fuel=1}")(effir.parse(text))) == 1
    assert pipeline("partial-eval{fuel=1000}").spelled() == "partial-eval{fuel=1000}"
