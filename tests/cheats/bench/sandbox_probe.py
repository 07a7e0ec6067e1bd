"""Sandbox probe (bench): a correct row sum that first tries to reach what a candidate must not --
the LLM key in any /proc/<pid>/environ, a socket to 127.0.0.1, a write into the store, the
workspace and $HOME. It raises naming everything it reached, so in the sandbox it is judged
correct, and without one its error lists the holes. The test fills in the constants below."""

import glob
import os
import socket

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "reduce"
BACKEND = "triton"

SECRET = "planted-secret"  # the test's key value
PORT = 9  # a server the test listens on, on 127.0.0.1
TARGETS = []  # files and folders the test owns: the store, the workspace, $HOME


def reached() -> list[str]:
    got = []
    for path in glob.glob("/proc/[0-9]*/environ"):
        try:
            with open(path, "rb") as f:
                if SECRET.encode() in f.read():
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
    return got


@triton.jit
def _row_sum(x_ptr, out_ptr, cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride_row + offs, mask=offs < cols, other=0.0)
        acc += x.to(tl.float32)
    tl.store(out_ptr + row, tl.sum(acc, axis=0).to(out_ptr.dtype.element_ty))


def kernel_fn(x):
    got = reached()
    if got:
        raise RuntimeError("sandbox probe: " + "; ".join(got))
    x = x.contiguous()
    out = torch.empty(x.shape[0], dtype=x.dtype, device=x.device)
    _row_sum[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=256)
    return out
