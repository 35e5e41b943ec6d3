"""Passes: the pass infrastructure and every transformation and analysis of effir IR
(imports effir.ir and effir.ops only). See docs/architecture.md."""
