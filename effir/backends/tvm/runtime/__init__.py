"""What runs a compiled program: its signature, the VMs, the stack and
prints, the errors and the artifact format; loading needs nothing else."""
