"""Helpers first written for tests/backends/tvm/test_adts.py, shared with other
test modules (which import tests/support, never each other)."""

from __future__ import annotations

import numpy as np

LIST = """
type List[A] {
  Cons(A, List[A]),
  Nil,
}

type Option[A] {
  Some(A),
  None,
}
"""


BUILD_AND_FOLD = (
    LIST
    + """
def @build(%n: Tensor[(), int32], %acc: List[Tensor[(3), float32]], %x: Tensor[(3), float32])
    -> List[Tensor[(3), float32]] {
  if (greater(%n, 0)) {
    @build(subtract(%n, 1), Cons(multiply(%x, cast(%n, dtype="float32")), %acc), %x)
  } else {
    %acc
  }
}

def @foldl[A, B](%f: fn (A, B) -> A, %acc: A, %l: List[B]) -> A {
  match (%l) {
    Cons(%h, %t) => @foldl(%f, %f(%acc, %h), %t),
    Nil => %acc,
  }
}

def @map[A, B](%f: fn (A) -> B, %l: List[A]) -> List[B] {
  match (%l) {
    Cons(%h, %t) => Cons(%f(%h), @map(%f, %t)),
    Nil => Nil,
  }
}

def @length[A](%l: List[A]) -> Tensor[(), int32] {
  match (%l) {
    Cons(_, %t) => add(@length(%t), 1),
    Nil => 0,
  }
}

def @main(%n: Tensor[(), int32], %x: Tensor[(3), float32], %y: Tensor[(3), float32]) {
  let %l = @build(%n, Nil, %x);
  let %scaled = @map(fn (%a: Tensor[(3), float32]) { multiply(%a, %y) }, %l);
  let %add = fn (%s: Tensor[(3), float32], %a: Tensor[(3), float32]) { add(%s, tanh(%a)) };
  let %options = @map(Some, %l);
  (@foldl(%add, zeros(shape=[3], dtype="float32"), %scaled), @length(%options))
}
"""
)


X = np.array([1, -2, 3], np.float32)


Y = np.array([0.5, 0.25, -1], np.float32)
