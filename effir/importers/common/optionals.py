"""ONNX's optional values as effir options: the prelude's ``Option[A] {
Some(A), None }``, and ``@option_has``, written in effir and added to the
imported module only when used.

A present value is ``Some(x)``, an absent one ``None``; where a graph
passes a plain value as an optional one (a loop whose carried optional
becomes a sequence after the first step), the value is wrapped in
``Some`` (``Block.widen``).
"""

from __future__ import annotations

from functools import cache

from ...ir.expr import Function, TypeData
from ...ir.module import IRModule
from ...ir.parser import parse

LIBRARY = """#[version = "0.0.5"]
type Option[A] {
  Some(A),
  None,
}

def @option_has[A](%o: Option[A]) -> Tensor[(), bool] {
  match (%o) {
    Some(_) => equal(0i64, 0i64),
    None => equal(0i64, 1i64),
  }
}
"""


@cache
def library() -> IRModule:
    """The option functions and the ``Option`` type, parsed once."""
    return parse(LIBRARY, source_name="effir/importers/common/optionals.py")


def option_data() -> TypeData:
    return library().type_defs["Option"]


def option_function(name: str) -> Function:
    return library().functions[name]


__all__ = ["library", "option_data", "option_function"]
