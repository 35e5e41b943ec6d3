"""``te`` rules: effir's pure operators as TVM tensor expressions.

One rule per operator family, registered on the operator registry through
``te_rule`` (see kernel/rules.py for the interface). The numpy rules in
``effir/ops`` are the reference; each rule here computes what its numpy rule
computes, bit for bit for integers and booleans and to 1e-5 relative for
floats. Where TVM's own lowering computes something else, the rule says so
and does it by hand:

[RULE TE-NAN] TVM lowers ``max``/``min`` to an ordered compare and select, so
``max(nan, 1)`` is 1 but ``max(1, nan)`` is nan, and ``!=`` to an *ordered*
not-equal, false when either side is NaN. numpy propagates NaN through
``maximum``, ``minimum``, ``max``, ``min`` and ``nn.relu``, counts NaN as the
maximum in ``argmax`` and says ``nan != x``; the rules test ``isnan``
explicitly.

[RULE TE-BOOL] TVM's LLVM code generator cannot compare booleans (``i1``);
booleans are compared, reduced and converted as ``int8``.

[RULE TE-F16] float16 is computed in float32 and rounded once per operator,
as the numpy rules do (numpy's own float16 loops do the same).

[RULE TE-DIV] Integer division truncates toward zero (C, TVM), not numpy's
floor, and the most negative integer divided by -1 wraps to itself. The
divisor is made safe before dividing: x86 traps on a zero divisor and on
``INT_MIN / -1``, and a vectorised select evaluates both sides. A division
by zero fails [RULE RUNTIME-CHECK].

[RULE RUNTIME-CHECK] Where the interpreter fails on a value (an integer division
by zero, ``power`` with a negative integer exponent, ``take`` with
``mode="fast"`` of an index out of range, an empty axis), the rule states
the check with ``checks.require`` and computes a safe value there; the
kernel computes its checks once per call into an error code and fails with
the interpreter's located error, on every target (kernel/checks.py, runtime/errors.py).

[RULE TE-MATH] TVM's ``tanh`` for LLVM is ``(1 - e^-2x) / (1 + e^-2x)``, off by
6e-5 relative near zero, and its ``exp`` calls libm once per element, which
does not vectorise. float32 ``exp`` and ``tanh`` (and ``sigmoid``,
``softmax`` through them) use the vectorisable approximations below, within
a few ulp of numpy's over the whole range, infinities, NaN, overflow to inf
and underflow to 0 included; float64 uses libm. The same code runs on every
target, so CPU and CUDA kernels agree.

[RULE TE-LET] An element read more than once in an expression is bound once
with ``tirx.Let``: inlining a producer then copies its expression once per
*reading site*, not once per use, so a chain of such operators stays linear
in size as TIR. (TVM's LLVM code generator still substitutes the lets; the
schedule's inline budget, schedule/inline.py [RULE SCHED-BUDGET], bounds what that
costs; integer ``power`` is staged over several computes for the same
reason.) A let's value is opaque [RULE TE-OPAQUE].

[RULE TE-OPAQUE] Two of TVM's integer analyses go wrong on expressions the
rules build, and the rules hide those expressions from them (``opaque``:
a ``reinterpret`` to the expression's own dtype, which LLVM emits as
nothing; measured: the assembly of float32, int32 and int64 kernels is
unchanged, line for line):

- *let values*: ``NarrowDataType`` memoizes the range of every integer
  expression it meets, and meets the operands of the calls its analyzer
  does not follow (``bitwise_or``, ``if_then_else``) a second time outside
  their let, where a let variable has its dtype's whole range; a variable
  whose value has a narrower range (a widened ``cast``, a masked half of
  [RULE TE-WRAP], a quotient's guard of [RULE TE-DIV]) then has two ranges and
  the build aborts ("conflicts with memorization"). Opaque, every let
  variable has one range, its dtype's, wherever it is met;
- *a division of a position* (``strided_set``'s slot of an output row):
  the iter-map simplification of ``FlattenBuffer`` rewrites ``(c - i) //
  d`` as ``i // -d + c // d``, which is wrong for floor division (``(3 -
  i) // 2`` at ``i = 1`` is 1, ``1 // -2 + 1`` is 0), and a position
  divided by a negative stride, or a consumer that reads it reversed
  (a ``strided_slice`` of stride -1, the backward of a loop), gives that
  form. The numerator is opaque, the divisor positive.

[RULE TE-DIVISOR] A float division's divisor is opaque too, unless it is a
nonzero immediate (``common.float_quotient``). TVM's constant folding aborts
the build on a float division by a literal 0 ("Divide by zero"), where
IEEE gives inf or NaN, and its simplifier makes such literals out of
divisors the program constants' opacity does not cover: it cancels
``x - x`` to 0 for any two equal expressions (its float cancellation
rules, which it states hold for finite values only), opaque constants
included, when ``create_prim_func`` simplifies a compute, and a let of
constants substituted [RULE TE-CONSTLET] or a constant producer inlined
then puts that 0 under the division (``divide(0f, subtract(1.5f,
1.5f))``, fused at -O1). Behind the ``reinterpret`` the division sees no
immediate; LLVM divides as IEEE says.

[RULE TE-WRAP] Integer ``+ - *`` wrap modulo 2^bits, as numpy's do. TVM's
LLVM code generator marks 32- and 64-bit integer ``+ - *`` no-signed-wrap
(unsigned: no-unsigned-wrap), so an overflow is undefined behaviour that
LLVM exploits: ``0u32 - x`` folds to 0 (it can only not wrap when x is 0),
``x + 4294967295u32`` to 4294967295, ``x - INT_MIN`` keeps INT_MIN, and a
comparison of an overflowing sum folds as if it had not overflowed. Every
integer ``+ - *`` of the rules (elementwise, reductions, ``power``,
``divide``, ``nn.dense``) goes through ``wrap_add``/``wrap_sub``/
``wrap_mul``, which never overflow in TVM's sense: 8- and 16-bit operations
carry no flags; 32-bit ones are computed exactly in 64 bits and truncated;
64-bit ones are computed on 32-bit halves held in uint64 (whose sums and
products fit) and reassembled with shifts and masks. LLVM narrows the
32-bit form back to one flag-free instruction.

[RULE TE-MASK] No unsigned ``x & (2^k - 1)`` with k >= 32 reaches TVM: the
low k bits are ``x - ((x >> k) << k)`` (``wrapping.low_bits``), which LLVM
folds back into one ``and``. TVM's integer analysis of such a mask of a constant
(``2^32 & 0xFFFFFFFF``, what a uint32 ``subtract(3, 3)`` becomes once
TVM's simplifier cancels the operands of its 64-bit exact difference)
aborts the build ("Divide by zero" in its constant folding) when the
expression is part of a condition it assumes: a zero check of a divisor,
a select. A mask of fewer bits is analysed correctly and stays, and so
does a signed one (TVM folds an int64 mask of a constant).

Known imprecisions: floating-point sums are accumulated in a different
order than numpy's pairwise sums.

Modules: ``common`` (helpers, ``opaque`` [RULE TE-OPAQUE], ``float_quotient``
[RULE TE-DIVISOR]), ``float_math`` [RULE TE-MATH] [RULE TE-NAN],
``wrapping`` [RULE TE-WRAP], ``elementwise`` [RULE TE-DIV], ``reductions``,
``shape`` (shapes and indexing), ``nn``; a rule's run-time checks are
``checks.require`` [RULE RUNTIME-CHECK]. Importing the package registers every
rule.
"""

# Importing the modules registers their rules.
from . import common, elementwise, float_math, nn, reductions, shape, wrapping
