"""nn.GRU and nn.LSTM as generated Triton kernels (KernelBench L3 35-42), which would otherwise leave
the whole problem to cuDNN: `rewrite_rnns` turns the module call into `rnn_forward` (the module
itself: the reference the shapes are propagated with), which the emitter writes as `_kb_rnn`.

Per layer, as cuDNN does:
1. the input projections of every time step and both directions at once, one GEMM launch
   (`_kb_rnn_xw_kernel`: [T*B, IN] x [D, G*H, IN]^T + b_ih, fp32 "ieee" products as the judge's
   TF32-off reference): the part of the gates that does not wait on the recurrence;
2. then one launch per time step for both directions (grid axis 2; the backward one walks the
   sequence from its end), each program owning BB batch rows and BH hidden units: the hidden part
   of its gates as a small GEMM over h_{t-1} (each chunk of h loaded once for the G gates), the
   gates in registers (GRU: r, z, n with n's hidden part apart for r * (W_hn h + b_hn); LSTM:
   i, f, g, o and the cell), h_t written straight into its slice of the layer's output, which the
   next step reads as h_{t-1}: no copies between steps.
The recurrence is latency-bound (T x layers launches of a few programs each): the step does only
the hidden state's product, and the CUDA-graph replay of the forward (templates/graph.py) takes the
launches' host time away. The first version (one launch per step and direction, the input part in
every step) ran KernelBench L3 41 (GRU, 6 layers, bidirectional, T 512) at 0.18x cuDNN on an H100.
"""

import torch
import triton
import triton.language as tl

from autokernel.kb.templates.launch import cdiv, launch

# ---- generated recurrent kernels (autokernel kb): nn.GRU / nn.LSTM, a projection and a launch per step ----
RNN_BLOCK_B = 16  # batch rows per program (tl.dot's minimum)
RNN_BLOCK_H = 32  # hidden units per program
RNN_BLOCK_K = 64  # reduction chunk over the hidden state
RNN_WARPS = 4
RNN_XW_BLOCK_M = 64  # the input projection's tile: rows (time x batch) ...
RNN_XW_BLOCK_N = 64  # ... gate columns ...
RNN_XW_BLOCK_K = 32  # ... and reduction chunk over the input features


@triton.jit
def _kb_rnn_xw_kernel(x_ptr, w_ptr, b_ptr, out_ptr, M, N, K, sx, HAS_BIAS: tl.constexpr, BM: tl.constexpr,
                      BN: tl.constexpr, BK: tl.constexpr):
    # out[d, m, n] = sum_k x[m, k] * w[d, n, k] + b[d, n]: every step's input part of the gates
    d = tl.program_id(2).to(tl.int64)
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    w_base = w_ptr + d * N * K
    acc = tl.zeros([BM, BN], tl.float32)
    for k0 in range(0, K, BK):
        rk = k0 + tl.arange(0, BK)
        a = tl.load(x_ptr + rm[:, None].to(tl.int64) * sx + rk[None, :], mask=(rm < M)[:, None] & (rk < K)[None, :],
                    other=0.0)
        w = tl.load(w_base + rn[None, :].to(tl.int64) * K + rk[:, None], mask=(rn < N)[None, :] & (rk < K)[:, None],
                    other=0.0)
        acc += tl.dot(a, w, input_precision="ieee")
    if HAS_BIAS:
        acc += tl.load(b_ptr + d * N + rn, mask=rn < N, other=0.0)[None, :]
    m = (rm < M)[:, None] & (rn < N)[None, :]
    tl.store(out_ptr + d * M * N + rm[:, None].to(tl.int64) * N + rn[None, :], acc, mask=m)


@triton.jit
def _kb_sigmoid(x):
    return 1.0 / (1.0 + tl.exp(-x))


@triton.jit
def _kb_tanh(x):
    return 2.0 / (1.0 + tl.exp(-2.0 * x)) - 1.0


@triton.jit
def _kb_rnn_step_kernel(gx_ptr, g_doff, h_ptr, h_doff, sh, whh_ptr, bhh_ptr, out_ptr, o_doff, so, cin_ptr, cout_ptr,
                        B, H, LSTM: tl.constexpr, HAS_BIAS: tl.constexpr, BB: tl.constexpr, BH: tl.constexpr,
                        BK: tl.constexpr):
    # One time step of direction d = program_id(2): its gate inputs at gx_ptr + d * g_doff ([B, G*H]),
    # h_{t-1} at h_ptr + d * h_doff (row stride sh), h_t to out_ptr + d * o_doff (row stride so), the
    # cell (LSTM) from cin_ptr + d * B * H to cout_ptr + d * B * H; the caller's offsets say where
    # the backward direction's step sits relative to the forward one's.
    d = tl.program_id(2).to(tl.int64)
    rb = tl.program_id(0) * BB + tl.arange(0, BB)
    rh = tl.program_id(1) * BH + tl.arange(0, BH)
    m = (rb < B)[:, None] & (rh < H)[None, :]
    if LSTM:
        GH = 4 * H
    else:
        GH = 3 * H
    hp = h_ptr + d * h_doff
    w = whh_ptr + d * GH * H
    a0 = tl.zeros([BB, BH], tl.float32)
    a1 = tl.zeros([BB, BH], tl.float32)
    a2 = tl.zeros([BB, BH], tl.float32)
    a3 = tl.zeros([BB, BH], tl.float32)
    wrow = rh[None, :].to(tl.int64) * H
    for k0 in range(0, H, BK):
        rk = k0 + tl.arange(0, BK)
        a = tl.load(hp + rb[:, None].to(tl.int64) * sh + rk[None, :], mask=(rb < B)[:, None] & (rk < H)[None, :],
                    other=0.0)
        wm = (rh < H)[None, :] & (rk < H)[:, None]
        a0 += tl.dot(a, tl.load(w + wrow + rk[:, None], mask=wm, other=0.0), input_precision="ieee")
        a1 += tl.dot(a, tl.load(w + H * H + wrow + rk[:, None], mask=wm, other=0.0), input_precision="ieee")
        a2 += tl.dot(a, tl.load(w + 2 * H * H + wrow + rk[:, None], mask=wm, other=0.0), input_precision="ieee")
        if LSTM:
            a3 += tl.dot(a, tl.load(w + 3 * H * H + wrow + rk[:, None], mask=wm, other=0.0), input_precision="ieee")
    if HAS_BIAS:
        hm = rh < H
        bh = bhh_ptr + d * GH
        a0 += tl.load(bh + rh, mask=hm, other=0.0)[None, :]
        a1 += tl.load(bh + H + rh, mask=hm, other=0.0)[None, :]
        a2 += tl.load(bh + 2 * H + rh, mask=hm, other=0.0)[None, :]
        if LSTM:
            a3 += tl.load(bh + 3 * H + rh, mask=hm, other=0.0)[None, :]
    gx = gx_ptr + d * g_doff + rb[:, None].to(tl.int64) * GH + rh[None, :]
    x0 = tl.load(gx, mask=m, other=0.0)
    x1 = tl.load(gx + H, mask=m, other=0.0)
    x2 = tl.load(gx + 2 * H, mask=m, other=0.0)
    if LSTM:  # gates i, f, g, o
        x3 = tl.load(gx + 3 * H, mask=m, other=0.0)
        offs_c = d * B * H + rb[:, None].to(tl.int64) * H + rh[None, :]
        c = tl.load(cin_ptr + offs_c, mask=m, other=0.0)
        c = _kb_sigmoid(x1 + a1) * c + _kb_sigmoid(x0 + a0) * _kb_tanh(x2 + a2)
        tl.store(cout_ptr + offs_c, c, mask=m)
        h = _kb_sigmoid(x3 + a3) * _kb_tanh(c)
    else:  # gates r, z, n: n's hidden part (with b_hn) scaled by r
        h_prev = tl.load(hp + rb[:, None].to(tl.int64) * sh + rh[None, :], mask=m, other=0.0)
        z = _kb_sigmoid(x1 + a1)
        n = _kb_tanh(x2 + _kb_sigmoid(x0 + a0) * a2)
        h = (1.0 - z) * n + z * h_prev
    tl.store(out_ptr + d * o_doff + rb[:, None].to(tl.int64) * so + rh[None, :], h, mask=m)


def _kb_rnn_params(module, layer, name, D):
    """The layer's `name` parameter of each direction, stacked: [D, ...] contiguous."""
    sfx = [f"l{layer}" + ("_reverse" if d else "") for d in range(D)]
    return torch.stack([getattr(module, f"{name}_{s}").float() for s in sfx])


def _kb_rnn(x, hx, module, lstm):
    """module(x, hx) for an nn.GRU (lstm False) or nn.LSTM of fp32 tensors: (output, h_n) or
    (output, (h_n, c_n)), as torch returns them."""
    if x.dim() == 2:  # unbatched: a batch of one, squeezed back
        hx1 = None if hx is None else tuple(h.unsqueeze(1) for h in hx) if lstm else hx.unsqueeze(1)
        out, hn = _kb_rnn(x.unsqueeze(1 if not module.batch_first else 0), hx1, module, lstm)
        out = out.squeeze(1 if not module.batch_first else 0)
        return (out, tuple(h.squeeze(1) for h in hn)) if lstm else (out, hn.squeeze(1))
    L, H, D = module.num_layers, module.hidden_size, 2 if module.bidirectional else 1
    G = 4 if lstm else 3
    seq = x.transpose(0, 1) if module.batch_first else x
    T, B = seq.shape[0], seq.shape[1]
    f32 = dict(device=x.device, dtype=torch.float32)
    if hx is None:
        h0 = torch.zeros(L * D, B, H, **f32)
        c0 = torch.zeros(L * D, B, H, **f32)
    elif lstm:
        h0, c0 = hx
    else:
        h0, c0 = hx, None
    hn = torch.empty(L * D, B, H, **f32)
    cn = torch.empty(L * D, B, H, **f32) if lstm else hn
    grid = (cdiv(B, RNN_BLOCK_B), cdiv(H, RNN_BLOCK_H), D)
    N, so = G * H, D * H
    inp = seq
    for layer in range(L):
        wih = _kb_rnn_params(module, layer, "weight_ih", D)
        whh = _kb_rnn_params(module, layer, "weight_hh", D)
        bih = _kb_rnn_params(module, layer, "bias_ih", D) if module.bias else wih
        bhh = _kb_rnn_params(module, layer, "bias_hh", D) if module.bias else whh
        x2 = inp.reshape(T * B, inp.shape[-1])
        if x2.stride(-1) != 1:
            x2 = x2.contiguous()
        M, K = T * B, x2.shape[1]
        gx = torch.empty(D, T, B, N, **f32)
        launch(_kb_rnn_xw_kernel, (cdiv(M, RNN_XW_BLOCK_M), cdiv(N, RNN_XW_BLOCK_N), D), x2, wih, bih, gx, M, N, K,
               x2.stride(0), HAS_BIAS=module.bias, BM=RNN_XW_BLOCK_M, BN=RNN_XW_BLOCK_N, BK=RNN_XW_BLOCK_K,
               num_warps=4)
        out = torch.empty(T, B, so, **f32)
        h0l = h0[layer * D:(layer + 1) * D].float().contiguous()  # [D, B, H]
        cells = [c0[layer * D:(layer + 1) * D].float().contiguous() if lstm else h0l]
        if lstm:
            cells += [torch.empty(D, B, H, **f32), torch.empty(D, B, H, **f32)]
        for step in range(T):
            tf, tb = step, T - 1 - step  # the forward direction's time step, and the backward one's
            if step == 0:
                h, h_doff, sh = h0l, B * H, H
            else:  # the previous step's output: forward at tf - 1, backward at tb + 1 (columns H..2H)
                h, h_doff, sh = out[tf - 1], (tb + 1 - (tf - 1)) * B * so + H, so
            cin = cells[0] if step == 0 else cells[1 + (step + 1) % 2] if lstm else h0l
            cout = cells[1 + step % 2] if lstm else h0l
            launch(_kb_rnn_step_kernel, grid, gx[0, tf], (T + tb - tf) * B * N, h, h_doff, sh, whh, bhh, out[tf],
                   (tb - tf) * B * so + H, so, cin, cout, B, H, LSTM=lstm, HAS_BIAS=module.bias, BB=RNN_BLOCK_B,
                   BH=RNN_BLOCK_H, BK=RNN_BLOCK_K, num_warps=RNN_WARPS)
        hn[layer * D].copy_(out[T - 1, :, :H])
        if D == 2:
            hn[layer * D + 1].copy_(out[0, :, H:])
        if lstm:
            cn[layer * D:(layer + 1) * D].copy_(cells[1 + (T - 1) % 2] if T else cells[0])
        inp = out
    out = inp.transpose(0, 1) if module.batch_first else inp
    return (out, (hn, cn)) if lstm else (out, hn)


SEARCH_SPACE = {"RNN_BLOCK_B": [16, 32], "RNN_BLOCK_H": [16, 32, 64, 128], "RNN_BLOCK_K": [16, 32, 64, 128],
                "RNN_WARPS": [1, 2, 4, 8], "RNN_XW_BLOCK_M": [32, 64, 128], "RNN_XW_BLOCK_N": [32, 64, 128],
                "RNN_XW_BLOCK_K": [16, 32]}


def kernel_fn(x, hx, module, lstm=False):
    """The file's entry function: the generated recurrent kernels."""
    return _kb_rnn(x, hx, module, lstm)
