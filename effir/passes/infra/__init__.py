"""Pass infrastructure: passes as declared objects and their context, the
invariants they declare, options, the registry of passes by name, pipelines
written as text, instruments, and loading a user's file of passes."""
