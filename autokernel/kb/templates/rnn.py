"""nn.GRU and nn.LSTM as generated Triton kernels (KernelBench L3 35-42), which would otherwise leave
the whole problem to cuDNN: `rewrite_rnns` turns the module call into `rnn_forward` (the module
itself: the reference the shapes are propagated with), which the emitter writes as `_kb_rnn`.

One launch per time step, layer and direction: a program owns BB batch rows and BH hidden units
and computes their gate pre-activations as a small GEMM over [x_t, h_{t-1}] (input and hidden
weights streamed from L2, fp32 "ieee" products as the judge's TF32-off reference), then the
gates in registers (GRU: r, z, n with n's hidden part kept apart for r * (W_hn h + b_hn); LSTM:
i, f, g, o and the cell), writing h_t straight into its slice of the layer's output, which the next
step reads as h_{t-1}: no copies between steps. Launch-bound by nature (T x layers x directions
launches): the CUDA-graph replay of the forward (templates/graph.py) is what makes it fast.
"""

import torch
import triton
import triton.language as tl

from autokernel.kb.templates.launch import cdiv, launch

# ---- generated recurrent step kernel (autokernel kb): nn.GRU / nn.LSTM, one launch per step ----
RNN_BLOCK_B = 16  # batch rows per program (tl.dot's minimum)
RNN_BLOCK_H = 32  # hidden units per program
RNN_BLOCK_K = 32  # reduction chunk over the input and the hidden state
RNN_WARPS = 4


@triton.jit
def _kb_rnn_dot(acc, a_ptr, sa, w_ptr, row0, rb, rh, B, K, H, BK: tl.constexpr):
    # acc[b, j] += sum_k a[b, k] * w[row0 + j, k]: a is [B, K] (row stride sa), w is [*, K] contiguous
    for k0 in range(0, K, BK):
        rk = k0 + tl.arange(0, BK)
        a = tl.load(a_ptr + rb[:, None].to(tl.int64) * sa + rk[None, :], mask=(rb < B)[:, None] & (rk < K)[None, :],
                    other=0.0)
        w = tl.load(w_ptr + (row0 + rh[None, :]).to(tl.int64) * K + rk[:, None],
                    mask=(rh < H)[None, :] & (rk < K)[:, None], other=0.0)
        acc += tl.dot(a, w, input_precision="ieee")
    return acc


@triton.jit
def _kb_sigmoid(x):
    return 1.0 / (1.0 + tl.exp(-x))


@triton.jit
def _kb_tanh(x):
    return 2.0 / (1.0 + tl.exp(-2.0 * x)) - 1.0


@triton.jit
def _kb_rnn_step_kernel(x_ptr, h_ptr, c_ptr, wih_ptr, whh_ptr, bih_ptr, bhh_ptr, hout_ptr, cout_ptr,
                        B, IN, H, sx, sh, so, LSTM: tl.constexpr, HAS_BIAS: tl.constexpr, BB: tl.constexpr,
                        BH: tl.constexpr, BK: tl.constexpr):
    rb = tl.program_id(0) * BB + tl.arange(0, BB)
    rh = tl.program_id(1) * BH + tl.arange(0, BH)
    m = (rb < B)[:, None] & (rh < H)[None, :]
    a0 = tl.zeros([BB, BH], tl.float32)
    a1 = tl.zeros([BB, BH], tl.float32)
    a2 = tl.zeros([BB, BH], tl.float32)
    a3 = tl.zeros([BB, BH], tl.float32)
    a0 = _kb_rnn_dot(a0, x_ptr, sx, wih_ptr, 0, rb, rh, B, IN, H, BK)
    a1 = _kb_rnn_dot(a1, x_ptr, sx, wih_ptr, H, rb, rh, B, IN, H, BK)
    a2 = _kb_rnn_dot(a2, x_ptr, sx, wih_ptr, 2 * H, rb, rh, B, IN, H, BK)
    a0 = _kb_rnn_dot(a0, h_ptr, sh, whh_ptr, 0, rb, rh, B, H, H, BK)
    a1 = _kb_rnn_dot(a1, h_ptr, sh, whh_ptr, H, rb, rh, B, H, H, BK)
    if LSTM:  # gates i, f, g, o: input and hidden parts summed
        a3 = _kb_rnn_dot(a3, x_ptr, sx, wih_ptr, 3 * H, rb, rh, B, IN, H, BK)
        a2 = _kb_rnn_dot(a2, h_ptr, sh, whh_ptr, 2 * H, rb, rh, B, H, H, BK)
        a3 = _kb_rnn_dot(a3, h_ptr, sh, whh_ptr, 3 * H, rb, rh, B, H, H, BK)
    else:  # gates r, z, n: n's hidden part apart (it is scaled by r)
        a3 = _kb_rnn_dot(a3, h_ptr, sh, whh_ptr, 2 * H, rb, rh, B, H, H, BK)
    if HAS_BIAS:
        hm = rh < H
        a0 += (tl.load(bih_ptr + rh, mask=hm, other=0.0) + tl.load(bhh_ptr + rh, mask=hm, other=0.0))[None, :]
        a1 += (tl.load(bih_ptr + H + rh, mask=hm, other=0.0) + tl.load(bhh_ptr + H + rh, mask=hm, other=0.0))[None, :]
        if LSTM:
            a2 += (tl.load(bih_ptr + 2 * H + rh, mask=hm, other=0.0)
                   + tl.load(bhh_ptr + 2 * H + rh, mask=hm, other=0.0))[None, :]
            a3 += (tl.load(bih_ptr + 3 * H + rh, mask=hm, other=0.0)
                   + tl.load(bhh_ptr + 3 * H + rh, mask=hm, other=0.0))[None, :]
        else:
            a2 += tl.load(bih_ptr + 2 * H + rh, mask=hm, other=0.0)[None, :]
            a3 += tl.load(bhh_ptr + 2 * H + rh, mask=hm, other=0.0)[None, :]
    offs_h = rb[:, None].to(tl.int64) * sh + rh[None, :]
    if LSTM:
        c = tl.load(c_ptr + rb[:, None].to(tl.int64) * H + rh[None, :], mask=m, other=0.0)
        c = _kb_sigmoid(a1) * c + _kb_sigmoid(a0) * _kb_tanh(a2)
        tl.store(cout_ptr + rb[:, None].to(tl.int64) * H + rh[None, :], c, mask=m)
        h = _kb_sigmoid(a3) * _kb_tanh(c)
    else:
        h_prev = tl.load(h_ptr + offs_h, mask=m, other=0.0)
        z = _kb_sigmoid(a1)
        n = _kb_tanh(a2 + _kb_sigmoid(a0) * a3)
        h = (1.0 - z) * n + z * h_prev
    tl.store(hout_ptr + rb[:, None].to(tl.int64) * so + rh[None, :], h, mask=m)


def _kb_rnn(x, hx, module, lstm):
    """module(x, hx) for an nn.GRU (lstm False) or nn.LSTM of fp32 tensors: (output, h_n) or
    (output, (h_n, c_n)), as torch returns them."""
    if x.dim() == 2:  # unbatched: a batch of one, squeezed back
        hx1 = None if hx is None else tuple(h.unsqueeze(1) for h in hx) if lstm else hx.unsqueeze(1)
        out, hn = _kb_rnn(x.unsqueeze(1 if not module.batch_first else 0), hx1, module, lstm)
        out = out.squeeze(1 if not module.batch_first else 0)
        return (out, tuple(h.squeeze(1) for h in hn)) if lstm else (out, hn.squeeze(1))
    L, H, D = module.num_layers, module.hidden_size, 2 if module.bidirectional else 1
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
    grid = (cdiv(B, RNN_BLOCK_B), cdiv(H, RNN_BLOCK_H))
    inp = seq
    for layer in range(L):
        out = torch.empty(T, B, D * H, **f32)
        for d in range(D):
            sfx = f"l{layer}" + ("_reverse" if d else "")
            wih = getattr(module, "weight_ih_" + sfx).contiguous()
            whh = getattr(module, "weight_hh_" + sfx).contiguous()
            bih = getattr(module, "bias_ih_" + sfx) if module.bias else wih
            bhh = getattr(module, "bias_hh_" + sfx) if module.bias else whh
            h = h0[layer * D + d].contiguous()
            c = c0[layer * D + d].contiguous() if lstm else h
            cells = (torch.empty(B, H, **f32), torch.empty(B, H, **f32)) if lstm else (h, h)
            for step in range(T):
                t = T - 1 - step if d else step
                xt = inp[t]
                if xt.stride(-1) != 1:
                    xt = xt.contiguous()
                ho = out[t, :, d * H:(d + 1) * H]
                co = cells[step % 2]
                launch(_kb_rnn_step_kernel, grid, xt, h, c, wih, whh, bih, bhh, ho, co, B, xt.shape[1], H,
                       xt.stride(0), h.stride(0), ho.stride(0), LSTM=lstm, HAS_BIAS=module.bias, BB=RNN_BLOCK_B,
                       BH=RNN_BLOCK_H, BK=RNN_BLOCK_K, num_warps=RNN_WARPS)
                h, c = ho, co
            hn[layer * D + d].copy_(h)
            if lstm:
                cn[layer * D + d].copy_(c)
        inp = out
    out = inp.transpose(0, 1) if module.batch_first else inp
    return (out, (hn, cn)) if lstm else (out, hn)


SEARCH_SPACE = {"RNN_BLOCK_B": [16, 32], "RNN_BLOCK_H": [16, 32, 64, 128], "RNN_BLOCK_K": [16, 32, 64],
                "RNN_WARPS": [1, 2, 4, 8]}


def kernel_fn(x, hx, module, lstm=False):
    """The file's entry function: the generated recurrent kernels."""
    return _kb_rnn(x, hx, module, lstm)
