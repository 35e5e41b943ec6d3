"""Loops of a loop kernel for the CPU: its schedule, rows across the
thread pool, packed batches."""
