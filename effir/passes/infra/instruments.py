"""Instruments: hooks a ``PassContext`` calls around each pass (per-pass
timing, printing the program before or after each pass or after those
that changed it), as TVM's pass instruments: ``should_run`` may skip a
pass, ``enter_context``/``exit_context`` hear the context entered and left
(to set up and flush what the instrument records). ``Instrument``, the
hooks' interface, is defined beside the ``PassContext`` that calls them
(transform.py, imported from here as well); this module holds the
instruments effir gives."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import TextIO

from effir.ir.module import IRModule
from effir.ir.printer import astext
from effir.passes.infra.transform import Instrument, Pass


@dataclass
class Timing(Instrument):
    """Seconds spent in each pass, in order (a pass run twice appears twice)."""

    records: list[tuple[str, float]] = field(default_factory=list)
    needs_changed = False

    def after(self, p: Pass, module: IRModule, changed: bool, seconds: float) -> None:
        self.records.append((p.name, seconds))

    def table(self) -> str:
        width = max([len("total")] + [len(n) for n, _ in self.records])
        lines = [f"{'pass':<{width}}  seconds"]
        lines += [f"{n:<{width}}  {s:.4f}" for n, s in self.records]
        lines.append(f"{'total':<{width}}  {sum(s for _, s in self.records):.4f}")
        return "\n".join(lines)


@dataclass
class PrintIR(Instrument):
    """Prints the program ``before`` each pass, ``after`` each pass, or only
    after the passes that changed it (``after-change``)."""

    when: str = "after"
    stream: TextIO | None = None

    def __post_init__(self) -> None:
        if self.when not in ("before", "after", "after-change"):
            raise ValueError(
                f"PrintIR: when must be before, after or after-change, not {self.when}"
            )

    @property
    def needs_changed(self) -> bool:  # type: ignore[override]
        return self.when == "after-change"

    def _print(self, header: str, module: IRModule) -> None:
        out = self.stream or sys.stderr
        out.write(f"// ----- {header} -----\n{astext(module)}")

    def before(self, p: Pass, module: IRModule) -> None:
        if self.when == "before":
            self._print(f"before {p.spelled()}", module)

    def after(self, p: Pass, module: IRModule, changed: bool, seconds: float) -> None:
        if self.when == "after" or (self.when == "after-change" and changed):
            self._print(f"after {p.spelled()}", module)


__all__ = ["Instrument", "PrintIR", "Timing"]
