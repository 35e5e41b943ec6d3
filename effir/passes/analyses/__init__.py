"""Analyses: what a program is (types, effects, calls, linearity of state,
exhaustiveness, sharing), computed without changing it."""
