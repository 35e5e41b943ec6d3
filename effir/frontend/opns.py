"""``effir.op``: one Python function per registered operator, generated
from the registry (``effir.op.nn.dense(x, w)``,
``effir.op.random.split(k, num=3)``), with signatures and docstrings taken
from the operator's definition so that ``help()`` and tab completion work.
Attributes are keyword arguments, validated by the registry."""

from __future__ import annotations

import inspect
import keyword
from collections.abc import Callable
from typing import Any

from ..ir.op import OpDef, all_ops
from .builder import apply_op, foreach, while_loop


def op_function(definition: OpDef) -> Callable[..., Any]:
    """The operator as a plain Python function (so ``help()`` shows its
    signature and documentation); ``.op_name`` names the operator."""
    name = definition.name

    def fn(*args: Any, **attrs: Any) -> Any:
        return apply_op(name, args, attrs)

    family, _, leaf = name.rpartition(".")
    fn.__name__ = leaf
    fn.__qualname__ = leaf
    fn.__module__ = "effir.op" + (f".{family}" if family else "")
    fn.__doc__ = _doc(definition)
    fn.__signature__ = _signature(definition)  # type: ignore[attr-defined]
    fn.op_name = name  # type: ignore[attr-defined]
    return fn


def _signature(definition: OpDef) -> inspect.Signature:
    params = []
    if definition.num_inputs is None:
        params.append(inspect.Parameter("args", inspect.Parameter.VAR_POSITIONAL))
    else:
        for i in range(definition.num_inputs + definition.optional_inputs):
            default = inspect.Parameter.empty if i < definition.num_inputs else None
            params.append(
                inspect.Parameter(f"x{i}", inspect.Parameter.POSITIONAL_ONLY, default=default)
            )
    for spec in definition.attrs:
        default = inspect.Parameter.empty if spec.required else spec.default
        params.append(
            inspect.Parameter(
                spec.name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=spec.kind
            )
        )
    return inspect.Signature(params)


def _doc(definition: OpDef) -> str:
    lines = [f"effir operator ``{definition.name}``.", ""]
    if definition.doc:
        lines += [definition.doc, ""]
    if definition.attrs:
        lines.append("Attributes:")
        for spec in definition.attrs:
            default = "required" if spec.required else f"default {spec.default!r}"
            lines.append(f"  {spec.name}: {spec.describe()} ({default})")
    lines.append(f"Effect: {definition.effect}; traits: {', '.join(sorted(definition.traits))}")
    lines.append("On numpy arrays it runs eagerly; on effir values it builds a call.")
    return "\n".join(lines)


class Namespace:
    """A family of operators (``effir.op.nn``)."""

    def __init__(self, name: str) -> None:
        self.__name__ = name

    def __repr__(self) -> str:
        return f"<effir operator namespace {self.__name__}>"

    def __dir__(self) -> list[str]:
        return sorted(k for k in self.__dict__ if not k.startswith("_"))


def _cf_foreach(body: Any, xs: Any, init: Any) -> Any:
    """cf.foreach(body, xs, init): ``body(x_t, state) -> (out_t, new_state)``."""
    return foreach(body, xs, init)


def _cf_while(
    cond: Any,
    body: Any,
    init: Any,
    max_iterations: Any = None,
    *,
    pad_outputs: bool = False,
) -> Any:
    """cf.while_loop(cond, body, init[, max_iterations]): ``body(state) ->
    (out, new_state)``; ``max_iterations`` a Python int (the attribute) or
    an effir value (the run-time argument); ``pad_outputs=True`` gives
    ``(outs padded to max_iterations rows, final, count)``."""
    return while_loop(
        cond, body, init, max_iterations=max_iterations, outputs=True, pad_outputs=pad_outputs
    )


def build_namespace() -> Namespace:
    """The ``effir.op`` namespace for every operator registered now."""
    root = Namespace("effir.op")
    for definition in all_ops():
        *families, leaf = definition.name.split(".")
        space = root
        for family in families:
            child = space.__dict__.get(family)
            if child is None:
                child = Namespace(f"{space.__name__}.{family}")
                setattr(space, family, child)
            space = child
        fn: Any = op_function(definition)
        if definition.name == "cf.foreach":
            fn = _cf_foreach
        elif definition.name == "cf.while_loop":
            fn = _cf_while
        setattr(space, leaf + "_" if keyword.iskeyword(leaf) else leaf, fn)
    return root
