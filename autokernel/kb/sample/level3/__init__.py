"""autokernel sample problems (KernelBench format), not the official KernelBench set."""
