"""Run-time values and numerics shared by the interpreter and the operator
rules: the value classes a program computes with, and the threefry2x32 PRNG.

This layer depends on numpy only; ``ir`` and ``ops`` may import it."""
