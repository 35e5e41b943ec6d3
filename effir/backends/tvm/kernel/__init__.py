"""Kernels: a primitive function to TE (the te rules, their checks and
rounding) to scheduled TIR."""
