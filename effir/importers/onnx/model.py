"""Reading a model: a ``ModelProto``, its bytes or a path, and the opset
each of its domains is read at. ``onnx`` is imported here, when a model is
read, never by ``import effir``."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ..common.diagnostics import ModelImportError

DEFAULT_DOMAINS = ("", "ai.onnx")
SUPPORTED_OPSETS = range(13, 22)
"""The opsets effir's converters are written and tested for; a model of
another opset is read too, node by node, where each node's operator
version is one a converter knows (docs/importers.md)."""


@dataclass(frozen=True)
class Model:
    """A model and how to read it: its name for diagnostics, the default
    domain's opset."""

    proto: Any
    name: str
    opset: int


def load(model_or_path: Any, opset: int | None) -> Model:
    try:
        import onnx  # lazy: onnx loads when a model is read
    except ImportError:
        raise ModelImportError(
            "reading ONNX models needs the onnx package (pip install onnx)"
        ) from None

    if isinstance(model_or_path, onnx.ModelProto):
        proto, name = model_or_path, f"<{model_or_path.graph.name or 'model'}>"
    elif isinstance(model_or_path, bytes | bytearray):
        proto, name = _parse(onnx, bytes(model_or_path), "<bytes>"), "<bytes>"
    elif isinstance(model_or_path, str | os.PathLike):
        name = os.fspath(model_or_path)
        try:
            with open(name, "rb") as handle:
                data = handle.read()
        except FileNotFoundError:
            raise ModelImportError(f"{name}: no such file") from None
        except IsADirectoryError:
            raise ModelImportError(f"{name}: is a directory") from None
        except OSError as err:
            raise ModelImportError(f"{name}: {err.strerror or err}") from None
        proto = _parse(onnx, data, name)
    else:
        raise ModelImportError(
            "from_onnx takes an onnx.ModelProto, its serialised bytes or a path, "
            f"got {type(model_or_path).__name__}"
        )
    return Model(proto, name, _opset(onnx, proto, name, opset))


def _parse(onnx: Any, data: bytes, name: str) -> Any:
    # lazy: onnx's protobuf loads when a model is read
    from google.protobuf.message import DecodeError

    try:
        proto = onnx.ModelProto.FromString(data)
    except (DecodeError, RuntimeError, ValueError) as err:
        raise ModelImportError(f"{name}: not an ONNX model ({err})") from None
    if not proto.HasField("graph"):
        raise ModelImportError(f"{name}: not an ONNX model (it has no graph)")
    return proto


def _opset(onnx: Any, proto: Any, name: str, asked: int | None) -> int:
    known = onnx.defs.onnx_opset_version()
    declared = [o.version for o in proto.opset_import if o.domain in DEFAULT_DOMAINS]
    version = asked if asked is not None else (declared[0] if declared else None)
    if version is None:
        raise ModelImportError(f"{name}: the model imports no opset of the default ONNX domain")
    if not 1 <= version <= known:
        raise ModelImportError(
            f"{name}: opset {version} is not one the installed onnx package knows (1 to {known})"
        )
    return version
