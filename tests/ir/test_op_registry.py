"""The operator registry: every operator of docs/semantics.md registered once, with a
validated attribute schema, an effect kind and traits."""

import pytest

import effir
from effir.ir import AttrError, AttrSpec, all_ops, get_op, lookup_op, op_def, register_op
from effir.ir.op import EFFECT_KINDS, TRAITS

DESIGN_OPS = """
add subtract multiply divide negative exp log sqrt tanh sigmoid nn.relu power maximum minimum
where equal less greater logical_and logical_or logical_not cast
sum mean max min argmax
reshape transpose expand_dims squeeze concatenate stack split strided_slice take broadcast_to
zeros ones full shape_of dyn.zeros dyn.ones dyn.full dyn.reshape
nn.dense nn.matmul nn.softmax nn.log_softmax nn.layer_norm nn.batch_norm_infer
nn.batch_norm_train random.dropout
random.key random.split random.fold_in random.uniform random.normal random.bernoulli
nn.dropout nn.batch_norm debug.print boolean_mask argwhere cf.foreach cf.while_loop
""".split()


@pytest.mark.parametrize("name", DESIGN_OPS)
def test_design_operator_is_registered(name):
    definition = lookup_op(name)
    assert definition is not None, name
    assert definition.effect in EFFECT_KINDS
    assert set(definition.traits) <= set(TRAITS)
    assert get_op(name) is definition.op  # one Op node per operator
    assert op_def(definition.op) is definition
    # Every operator parses with its required attributes and round-trips.
    required = {s.name: _sample(s) for s in definition.attrs if s.required}
    definition.normalize_attrs(required)


def _sample(spec: AttrSpec):
    return {
        "int": 1,
        "float": 0.5,
        "bool": True,
        "str": "x",
        "dtype": "float32",
        "ints": (1,),
        "int_or_ints": 2,
    }[spec.kind]


def test_effect_kinds_of_the_effectful_surface_operators():
    assert lookup_op("nn.dropout").effect == "random"
    assert lookup_op("nn.batch_norm").effect == "state"
    assert lookup_op("debug.print").effect == "io"
    assert lookup_op("random.dropout").effect == "pure"  # keyed: pure
    assert lookup_op("nn.batch_norm_train").effect == "pure"


def test_names_are_unique():
    names = [d.name for d in all_ops()]
    assert len(names) == len(set(names))
    with pytest.raises(ValueError, match="already registered"):
        register_op("add", 2)


def test_attribute_validation_and_normalization():
    sum_def = lookup_op("sum")
    attrs = sum_def.normalize_attrs({"axis": [1, 2]})
    assert attrs["axis"] == (1, 2) and attrs["keepdims"] is False
    with pytest.raises(AttrError, match="expects an integer or a list of integers"):
        sum_def.normalize_attrs({"axis": "x"})
    with pytest.raises(AttrError, match="expects True or False"):
        sum_def.normalize_attrs({"keepdims": 1})
    with pytest.raises(AttrError, match="unknown attribute 'bogus'"):
        sum_def.normalize_attrs({"bogus": 1})
    with pytest.raises(AttrError, match="missing required attribute 'newshape'"):
        lookup_op("reshape").normalize_attrs({})
    assert lookup_op("random.uniform").normalize_attrs({"low": 1})["low"] == 1.0  # int -> float
    with pytest.raises(AttrError, match="got None"):
        lookup_op("cast").normalize_attrs({"dtype": None})


def test_missing_rules_name_the_operator_and_the_rule():
    with pytest.raises(NotImplementedError, match="operator add has no 'tvm_lowering' rule"):
        lookup_op("add").rule("tvm_lowering")


def test_unknown_operator():
    with pytest.raises(AttrError, match="unknown operator"):
        get_op("nope")
    assert isinstance(effir.Error("x"), Exception)


def test_call_op_builds_normalized_calls():
    from effir.ir import Var, call_op

    x = Var("x")
    call = call_op("sum", x, axis=[1])
    assert call.attrs["axis"] == (1,) and call.attrs["keepdims"] is False
    effir.check_well_formed(effir.ir.Function((x,), call))
    with pytest.raises(AttrError, match="takes 1 argument"):
        call_op("sum", x, x)
    with pytest.raises(AttrError, match="unknown operator"):
        call_op("summ", x)
