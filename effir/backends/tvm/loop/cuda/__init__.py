"""A whole ``cf.foreach`` loop as one persistent GPU kernel.

[RULE CUDA-PERSISTENT] Purpose
-------------------------
A recurrent loop run by the VM step by step launches several kernels per
step from the host, each of which reads the recurrent weights from memory
again: on an H200 the hidden-256 GRU took 8.4 ms for 100 steps (JAX 0.9,
cuDNN 1.5). A step of a GRU is a few microseconds of work, so the loop is
launch- and latency-bound. As the CPU's whole loop (loop/), a static and
pure body compiles into one function for the whole loop, here two GPU
kernels: the *prologue*, an ordinary scheduled kernel computing what the
steps need and does not depend on the state (the input projections of all
steps, one matrix product, [HOIST]), then one *persistent* kernel running
every step, its grid alive for the whole loop, the recurrent weights held
on chip from the first step to the last (Diamos et al., "Persistent RNNs:
Stashing Recurrent Weights On-Chip", ICML 2016; cuDNN's persistent RNN
algorithm).

The algorithm
-------------
1. [EVAL] [CLASS] [HOIST] as on the CPU (loop/evaluate.py, loop/graph.py),
   without the CPU's panels and padded tiles.
2. [STAGES] (stages.py) The step's operations: the stages the kernel
   computes one after the other (the products, the outputs, what is read
   inside a product or by many elements), the rest inlined into them.
3. [OWNERS] (owners.py) Each stage split across the grid's blocks along
   one axis (the GRU's new state by hidden unit, its gate product by the
   unit each row feeds), so that a block reads within a step only what it
   computed itself; what cannot be split so is computed whole by every
   block (small) or after a grid barrier of its own (a *phase*).
4. [KERNEL] [ITEMS] [WEIGHTS] [PARITY] (kernel.py) The kernel: each
   block stages the weights its units read into shared memory once, then
   per step computes its elements of each stage (a reduction's element
   shared by up to 8 threads, their partial sums added in order), a
   ``__syncthreads`` between stages, a grid barrier at the end of each
   phase (cooperative groups' ``grid.sync()``, the kernel launched
   cooperatively, so that every block is resident: CUDA refuses the
   launch otherwise, it cannot hang). A step small enough
   (``SINGLE_BLOCK_WORK``: the hidden-32 GRU) runs in one block, its
   state and stages in shared memory, with ``__syncthreads`` alone.
5. [THREADS] (threads.py) The same kernel built to run serially on the
   CPU, each piece between barriers run by every thread before the next:
   the algorithm is tested against the interpreter without a GPU.

The calls (the prologue, then the kernel) are made by relax/whole_loops.py
[RULE LOOP-WHOLE].

Known limitations: it has not yet run on a GPU (built, compiled to PTX by
nvcc, and run serially on the CPU); only static, pure bodies (anything
else is a VM loop, relax/loops.py); shared memory is the 48 KiB a block
gets without asking (larger weights are read from global memory, through
the caches); the grid is at most the GPU's multiprocessors, read when the
program is built (``DEFAULT_MULTIPROCESSORS`` without a GPU): a build
moved to a GPU with fewer fails at its launch (a CUDA error, never a hang).
"""

from __future__ import annotations

from ...emulation import emulated, emulation
from .function import CudaLoop, lower_cuda_loop

__all__ = ["CudaLoop", "emulated", "emulation", "lower_cuda_loop"]
