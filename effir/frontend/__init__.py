"""Frontends: Python source and traces to effir IR. See docs/architecture.md."""
