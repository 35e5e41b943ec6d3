"""Schedules of a kernel for the CPU (LLVM)."""
