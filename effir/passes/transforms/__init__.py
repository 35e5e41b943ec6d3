"""Transformations: passes that rewrite a program (normal forms, state
passing, partial evaluation, folding, fusion, dead and common code)."""
