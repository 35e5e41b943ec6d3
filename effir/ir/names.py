"""Which names the text format can spell, checked where names enter the IR.

A module built in Python must print to text that reads back as the same
module, so global, ADT, constructor, dimension, type-parameter and attribute
names are checked when the nodes holding them are built, not discovered
later as an unparsable file.
"""

from __future__ import annotations

import re

from .diagnostics import WellFormedError

IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

KEYWORDS = frozenset(
    {"def", "fn", "let", "if", "else", "match", "type", "global", "ref", "ref_read", "ref_write"}
)
# Words the parser reads as literals or special forms in expression position.
EXPRESSION_WORDS = frozenset({"True", "False", "meta", "_"})
# Words the parser reads as built-in types in type position (dtypes are added
# by types.py, which owns them).
BUILTIN_TYPE_WORDS = frozenset({"Tensor", "Ref", "Key", "_"})


def is_identifier(name: object) -> bool:
    return isinstance(name, str) and IDENTIFIER.match(name) is not None


def require_name(name: object, what: str, reserved: frozenset[str] = frozenset()) -> None:
    """Raise WellFormedError unless ``name`` is an identifier outside ``reserved``."""
    if not is_identifier(name):
        raise WellFormedError(
            f"{what} {name!r} is not a valid name (letters, digits and _, not starting with a digit)"
        )
    if name in reserved:
        raise WellFormedError(f"{what} {name!r} is a reserved word of the text format")
