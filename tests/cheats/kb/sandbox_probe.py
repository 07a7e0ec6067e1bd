"""Sandbox probe (KernelBench): a correct ModelNew for 1_ReLU that first tries to read the LLM key
from any /proc/<pid>/environ, connect to 127.0.0.1 and write into the store, the workspace and
$HOME, and raises naming what it reached. The test fills in the constants below."""

import glob
import os
import socket

import torch
import torch.nn as nn
import triton
import triton.language as tl

KERNEL_TYPE = "kb"
BACKEND = "triton"

SECRET = "planted-secret"
PORT = 9
TARGETS = []


def kernel_fn(x):
    return x


@triton.jit
def _relu(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=m), 0.0), mask=m)


class ModelNew(nn.Module):
    def forward(self, x):
        got = []
        for path in glob.glob("/proc/[0-9]*/environ"):
            try:
                if SECRET.encode() in open(path, "rb").read():
                    got.append(f"read the key from {path}")
            except OSError:
                pass
        try:
            socket.create_connection(("127.0.0.1", PORT), timeout=2).close()
            got.append(f"connected to 127.0.0.1:{PORT}")
        except OSError:
            pass
        for target in TARGETS:
            path = os.path.join(target, "planted.txt") if os.path.isdir(target) else target
            try:
                with open(path, "ab") as f:
                    f.write(b"planted")
                got.append(f"wrote {path}")
            except OSError:
                pass
        if got:
            raise RuntimeError("sandbox probe: " + "; ".join(got))
        x = x.contiguous()
        y = torch.empty_like(x)
        _relu[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y
