"""A specialised program lowered to a Relax module (relax/lower.py)."""
