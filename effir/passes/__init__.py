"""Passes, in three layers (imports effir.ir and effir.ops only):
``transforms`` (passes that rewrite a program) on ``infra`` (passes as
declared objects, their context, registry and pipelines) on ``analyses``
(types, effects, calls, linearity: what a program is). See
docs/architecture.md."""
