"""Schedules of a kernel for CUDA GPUs."""
