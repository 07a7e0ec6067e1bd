"""Starts for the KernelBench problems that used to start torch-only or launch-bound (issue 22):
batch / instance / group / layer norms as generated kernels, attention written op by op through the
flash kernel, forwards fx cannot trace (sizes used as numbers, stateful modules), GRU / LSTM as a
generated recurrent kernel, einsum and diagonal matmuls by what they compute, the CUDA-graph
replay wrapper, the problem shrinker and the scripts that scan whole levels. Each small problem
stands for official ones (named in its test) and is run under the interpreter against Model."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")

ROOT = Path(__file__).resolve().parents[1]
HEAD = "import math\nimport torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\n"


def problem(body: str, inputs: str, init: str = "[]", pid: int = 1, name: str = "start_test"):
    from autokernel.kb.problems import Problem

    code = (HEAD + f"{body.strip()}\n\n\ndef get_inputs():\n    return {inputs}\n\n\n"
            f"def get_init_inputs():\n    return {init}\n")
    return Problem("checkout", 1, pid, name, code)


def run(p, trials: int = 2, eval_too: bool = False, atol: float = 1e-4):
    """The start against Model (same seed, same inputs); its module, both models and the solution."""
    from autokernel.kb.problems import load_source
    from autokernel.kb.solutions import KIND_TORCH, initial_solution

    sol = initial_solution(p)
    assert sol.kind != KIND_TORCH, sol.note
    mod = load_source(sol.source, f"kb_start_test_{p.code_hash}")
    torch.manual_seed(0)
    ref = mod.Model(*mod.get_init_inputs())
    torch.manual_seed(0)
    new = mod.ModelNew(*mod.get_init_inputs())
    for mode in ("train", "eval") if eval_too else ("train",):
        if mode == "eval":
            ref.eval(), new.eval()
        for trial in range(trials):
            torch.manual_seed(trial + 1)
            inputs = mod.get_inputs()
            with torch.no_grad():
                want, got = ref(*inputs), new(*inputs)
            torch.testing.assert_close(got, want, atol=atol, rtol=atol)
    return sol, ref, new


# -- normalisations (L1 33-35, L2's conv + norm problems, L3's ResNets) ------------------------------

NORM = '''
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.n = {norm}

    def forward(self, x):
        return {expr}
'''


@pytest.mark.parametrize("norm, expr, inputs", [
    ("nn.BatchNorm2d(8)", "torch.relu(self.n(x)) + 1.0", "[torch.rand(3, 8, 5, 7) * 4 + 2]"),
    ("nn.BatchNorm1d(40, momentum=None)", "self.n(x)", "[torch.randn(16, 40)]"),
    ("nn.InstanceNorm2d(6, affine=True)", "self.n(x) / 2.0", "[torch.randn(2, 6, 9, 11) + 3]"),
    ("nn.GroupNorm(4, 16)", "torch.sigmoid(self.n(x))", "[torch.randn(2, 16, 5, 5)]"),
])
def test_norms_are_generated_kernels_fused_with_what_follows(home, norm, expr, inputs):
    p = problem(NORM.format(norm=norm, expr=expr), inputs)
    sol, ref, new = run(p, eval_too=True)
    assert sol.kind == "norm" and sol.fused >= 1, sol.describe()
    assert any(r.startswith("norm:") for r in sol.replaced) and not any("Norm" in k for k in sol.kept)
    # a BatchNorm in training updates its running statistics as torch's does
    for (name, a), (_, b) in zip(ref.named_buffers(), new.named_buffers()):
        torch.testing.assert_close(b, a, atol=1e-6, rtol=1e-5, msg=name)


def test_layernorm_next_to_a_matmul_is_generated_and_alone_keeps_the_starter(home):
    p = problem(NORM.format(norm="nn.Sequential(nn.Linear(20, 30), nn.LayerNorm(30))", expr="self.n(x) * 3.0"),
                "[torch.randn(6, 20)]")
    sol, _, _ = run(p)
    assert sol.library == "matmul" and any(r.startswith("norm:") for r in sol.replaced)
    alone = problem(NORM.format(norm="nn.LayerNorm([5, 7])", expr="self.n(x)"), "[torch.randn(3, 4, 5, 7)]")
    sol, _, _ = run(alone)
    assert sol.library == "layernorm" and not any(r.startswith("norm:") for r in sol.replaced)


# -- attention (L3 43 / 44 / 50) and forwards fx cannot trace ------------------------------------------

ATTN = '''
class Model(nn.Module):
    def __init__(self, n_embd, n_head, max_seqlen):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.attn_dropout = nn.Dropout(0.0)
        self.register_buffer("bias", {mask}.view(1, 1, max_seqlen, max_seqlen))
        self.n_head, self.n_embd = n_head, n_embd

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float('-inf'))
        att = self.attn_dropout(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)
'''


@pytest.mark.parametrize("mask, causal", [("torch.tril(torch.ones(24, 24))", True),
                                          ("torch.ones(24, 24).tril(1)", False)])
def test_causal_attention_written_out_runs_the_flash_kernel(home, mask, causal):
    p = problem(ATTN.format(mask=mask), "[torch.randn(2, 20, 32)]", "[32, 4, 24]")
    sol, _, new = run(p)
    assert sol.library == "matmul+flash_attention", sol.describe()
    assert "_kb_masked_sdpa(" in sol.source and "def _fa_kernel_fn(" in sol.source
    assert not any(k in sol.kept for k in ("softmax", "matmul", ".masked_fill"))
    # the mask buffer was checked once (cached per version) and decided the path
    cache = sys.modules[type(new).__module__]._KB_CAUSAL
    assert list(cache.values()) == [causal]


MHA = '''
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.m = {module}
        self.norm = nn.LayerNorm(32)

    def forward(self, x, y):
        return {expr}
'''


@pytest.mark.parametrize("module, expr", [  # L3 31, a cross attention, L3 28 (pre-norm), L3 32 (post-norm)
    ("nn.MultiheadAttention(32, 4)", "self.norm(self.m(x, x, x)[0] + x)"),
    ("nn.MultiheadAttention(32, 4, bias=False, batch_first=True)", "self.m(x, y, y, need_weights=False)[0]"),
    ("nn.TransformerEncoder(nn.TransformerEncoderLayer(32, 4, 48, dropout=0.0, activation='gelu', "
     "norm_first=True), 2, norm=nn.LayerNorm(32), enable_nested_tensor=False)", "self.m(x) + y"),
    ("nn.TransformerEncoderLayer(32, 4, 48, dropout=0.0, batch_first=True)", "self.m(x)"),
])
def test_pytorch_attention_modules_run_the_flash_kernel(home, module, expr):
    p = problem(MHA.format(module=module, expr=expr), "[torch.randn(6, 3, 32), torch.randn(6, 3, 32)]")
    sol, _, _ = run(p, trials=1)
    assert sol.library == "matmul+flash_attention", sol.describe()
    assert not {"MultiheadAttention", "TransformerEncoder", "TransformerEncoderLayer", "Linear"} & set(sol.kept)


def test_untraceable_stateful_forward_is_traced_with_concrete_shapes(home):
    """L3 33 (VanillaRNN): a stateful forward that reassigns self.hidden; `B, T = x.shape` loops."""
    p = problem('''
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden = torch.randn((4, 12))
        self.i2h = nn.Linear(10 + 12, 12)

    def forward(self, x, initial_hidden=None):
        if initial_hidden is not None:
            self.hidden.copy_(initial_hidden)
        self.hidden = self.hidden.to(x.device)
        outs = []
        for t in range(x.size(1)):
            self.hidden = torch.tanh(self.i2h(torch.cat((x[:, t], self.hidden), dim=1)))
            outs.append(self.hidden)
        return torch.stack(outs, 1)
''', "[torch.rand(4, 3, 10), torch.rand(4, 12)]")
    sol, _, _ = run(p)
    assert sol.library == "matmul" and sum(r.startswith("lib:") for r in sol.replaced) == 3


# -- recurrent networks (L3 35-42) ---------------------------------------------------------------------

@pytest.mark.parametrize("rnn, call, out", [
    ("nn.GRU(6, 8, 2, bidirectional=True)", "self.r(x, h0)", "[0]"),
    ("nn.LSTM(6, 8, 2, batch_first=True)", "self.r(x.transpose(0, 1), (h0[:2], h0[2:]))", "[1][1]"),
])
def test_gru_and_lstm_run_the_generated_recurrent_kernel(home, rnn, call, out):
    p = problem(f'''
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.r = {rnn}

    def forward(self, x, h0):
        return {call}{out}
''', "[torch.randn(5, 3, 6), torch.randn(4, 3, 8)]")
    sol, _, _ = run(p, trials=1)
    assert sol.kind == "rnn" and any(r.startswith("rnn:") for r in sol.replaced)
    assert sol.graph == 1  # 20 or 10 step launches of tiny tensors: replayed as a graph by default
    assert not any(k in ("GRU", "LSTM") for k in sol.kept)


# -- structured matmuls (L1 11 einsum, L1 12 diagonal) -------------------------------------------------

def test_einsum_matmul_and_diagonal_scaling(home):
    ein = problem('''
class Model(nn.Module):
    def forward(self, A, B):
        return torch.einsum("bijl,lk->bijk", A, B)
''', "[torch.randn(2, 3, 5, 16), torch.randn(16, 12)]")
    sol, _, _ = run(ein)
    assert sol.library == "matmul" and not sol.kept
    diag = problem('''
class Model(nn.Module):
    def forward(self, A, B):
        return A.unsqueeze(1) * B - B / A.unsqueeze(1)
''', "[torch.rand(33) + 0.5, torch.rand(33, 70)]")
    sol, _, _ = run(diag)
    assert sol.kind == "elementwise"
    # the broadcast operand is indexed in place (x and y swapped), not expanded into a copy
    from autokernel.kb.problems import load_source

    mod = load_source(sol.source, f"kb_start_test_{diag.code_hash}")
    a, b = torch.rand(9, 1) + 0.5, torch.rand(9, 4)
    for op, f in ((11, torch.sub), (13, torch.div), (12, torch.mul)):
        torch.testing.assert_close(mod._kb_ew(op, a, b), f(a, b))


def test_inplace_activation_on_an_intermediate_runs_out_of_place(home):
    """MobileNet's ReLU6(inplace=True) after a layer: nothing else reads its input, so the kernel
    may write a new tensor; on one that is read again it stays torch's."""
    p = problem("class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                "        self.fc = nn.Linear(8, 8)\n        self.act = nn.ReLU6(inplace=True)\n"
                "        self.act2 = nn.Hardtanh(-0.5, 0.5, inplace=True)\n\n"
                "    def forward(self, x):\n        h = self.fc(x) * 4.0\n        return self.act(h + 1.0) + self.act2(h)",
                "[torch.randn(5, 8)]")
    sol, _, _ = run(p, trials=1)
    assert "ReLU6" not in sol.kept and "Hardtanh" in sol.kept


def test_groups_computing_the_same_share_one_fused_kernel(home):
    """L3's repeated blocks (DenseNet201: 103 groups, 2 kernels) and L3 34's unrolled RNN steps."""
    p = problem("class Model(nn.Module):\n    def forward(self, x, y):\n"
                "        return (torch.relu(x) * 2.0 + 1.0) @ (torch.relu(y) * 2.0 + 1.0)",
                "[torch.randn(5, 8), torch.randn(8, 3)]")
    sol, _, _ = run(p, trials=1)
    assert sol.fused == 2 and sol.source.count("@triton.jit\ndef _kb_fused_") == 1
    assert sol.source.count("_kb_fused_0(") == 3 and "_kb_fused_1" not in sol.source  # its def and two calls


def test_tensor_made_from_a_number_in_forward_is_written_out(home):
    """L2 31: torch.min(x, torch.tensor(self.c)) leaves the constant on the traced module only."""
    p = problem("class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                "        self.c = 0.25\n\n    def forward(self, x):\n"
                "        return torch.min(x, torch.tensor(self.c)) * 2.0",
                "[torch.randn(5, 8)]")
    sol, _, _ = run(p, trials=1)
    assert "torch.tensor(0.25, dtype=torch.float32)" in sol.source


@pytest.mark.parametrize("fn, make", [("triu", "torch.triu"), ("tril", "torch.tril")])
def test_triangular_matmul_takes_a_sixth_of_the_work_when_the_inputs_are_triangular(home, fn, make):
    """L1 14 / 15: triu(A @ B) of upper-triangular A, B; a non-triangular input takes the full K range."""
    from autokernel.kb.problems import load_source

    p = problem(f"class Model(nn.Module):\n    def forward(self, A, B):\n        return torch.{fn}(torch.matmul(A, B))",
                f"[{make}(torch.rand(70, 70)), {make}(torch.rand(70, 70))]")
    sol, ref, new = run(p)
    assert sol.kind == "triangular-matmul" and not sol.kept
    a, b = torch.rand(70, 70), torch.rand(70, 70)
    torch.testing.assert_close(new(a, b), ref(a, b), atol=1e-4, rtol=1e-4)


REDUCTIONS = ("class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
              "        self.fc = nn.Linear(12, 24)\n        self.pool = nn.AdaptiveAvgPool2d((1, 1))\n\n"
              "    def forward(self, x, y):\n        a = torch.logsumexp(self.fc(x) * 3.0, dim=1, keepdim=True)\n"
              "        return a, self.pool(y).flatten(1), torch.sum(y, dim=[2, 3]), y.mean(1)",
              "[torch.randn(6, 12), torch.randn(2, 5, 7, 9)]", "[]")


def test_logsumexp_sums_and_global_pools_next_to_a_matmul_are_generated(home):
    """L2 18 / 22 / 45 / 64 (a logsumexp after a GEMM), L3's ResNets (a global average pool)."""
    sol, _, _ = run(problem(*REDUCTIONS))
    assert sol.library == "matmul" and sum(r.startswith("dimred:") for r in sol.replaced) == 4
    assert not {"logsumexp", "sum", "mean", "AdaptiveAvgPool2d"} & set(sol.kept)


# -- an exclusive cumulative sum in one pass (L1 92) ----------------------------------------------------

EXCLUSIVE = '''
class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        cumsum = torch.cumsum(x.narrow(dim=self.dim, start=0, length=x.size(self.dim) - 1), dim=self.dim)
        return torch.cat(({head}(x.select(self.dim, 0).unsqueeze(self.dim)), cumsum), dim=self.dim)
'''


@pytest.mark.parametrize("head, dim, taken", [
    ("torch.zeros_like", 1, True),  # L1 92 (its rows along the last dim)
    ("torch.zeros_like", 0, True),  # along a dim that is not the last: moved last and back
    ("torch.ones_like", 1, False),  # another head: the cat stays, the scan is the plain one
])
def test_an_exclusive_cumsum_is_one_scan_pass(home, head, dim, taken):
    sol, ref, new = run(problem(EXCLUSIVE.format(head=head), "[torch.rand(6, 300)]", f"[{dim}]"))
    assert ("exclusive=True" in sol.source) is taken, sol.describe()
    assert ("cat" in sol.kept) is not taken, sol.kept
    if taken:
        assert sol.kept == [], sol.kept  # the size arithmetic and views the cat alone needed are gone too
        x = torch.randn(4, 300) if dim == 1 else torch.randn(6, 5)
        with torch.no_grad():
            torch.testing.assert_close(new(x), ref(x), atol=1e-4, rtol=1e-4)


# -- a GEMM's sum over its output features as a matrix-vector product (L2 14, 18, 51) -------------------

GEMM_SUM = '''
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(24, 40)
        self.weight = nn.Parameter(torch.randn(40, 24))
        self.subtract = nn.Parameter(torch.randn(40))

    def forward(self, x):
        return {body}
'''


@pytest.mark.parametrize("body, taken", [
    ("torch.sum(torch.matmul(x, self.weight.T) / 2, dim=1, keepdim=True) * 1.5", True),  # L2 14
    ("torch.mean(self.linear(x) - self.subtract, dim=1, keepdim=True)", True),  # L2 51
    ("torch.sum(self.linear(x), dim=1, keepdim=True).amax(1)", True),  # L2 18
    ("(2.0 - 3.0 * (x @ self.weight.t() + 0.5)).sum(-1)", True),  # a shift on the left negates the chain
    ("torch.sum(torch.sigmoid(self.linear(x)), dim=1)", False),  # not affine: the GEMM stays (L2 56)
    ("torch.sum(self.linear(x) * x.sum(1, keepdim=True), dim=1)", False),  # scaled by a tensor: stays
    ("torch.sum(self.linear(x), dim=0)", False),  # over the rows: stays
])
def test_a_gemms_sum_over_its_features_is_a_matrix_vector_product(home, body, taken):
    sol, ref, new = run(problem(GEMM_SUM.format(body=body), "[torch.rand(6, 24)]"))
    assert any(r.startswith("gemmsum:") for r in sol.replaced) is taken, sol.describe()
    if taken:
        assert not {"linear", "matmul"} & set(sol.kept), sol.kept
        x = torch.randn(9, 24)  # other rows and signs than the problem's inputs
        with torch.no_grad():
            torch.testing.assert_close(new(x), ref(x), atol=1e-4, rtol=1e-4)


# -- a transposed convolution's global mean by what it computes (L2 42) ------------------------------

CONV_MEAN = '''
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv_transpose = {conv}
        self.bias = nn.Parameter(torch.randn(6, 1, 1))

    def forward(self, x):
        x = {mean}
        x = torch.logsumexp(x + self.bias, dim=1, keepdim=True)
        return torch.sum(x, dim=(2, 3)) * 10.0
'''


@pytest.mark.parametrize("conv, mean, taken", [
    ("nn.ConvTranspose2d(4, 6, 3)", "torch.mean(self.conv_transpose(x), dim=(2, 3), keepdim=True)", True),  # L2 42
    ("nn.ConvTranspose2d(4, 6, 3, stride=2, dilation=2, output_padding=1, groups=2)",
     "F.adaptive_avg_pool2d(self.conv_transpose(x), 1)", True),
    ("nn.ConvTranspose2d(4, 6, 3, stride=2)", "self.conv_transpose(x).mean([-1, -2]).view(-1, 6, 1, 1)", True),
    # padding crops products away: the identity fails and the convolution stays cuDNN's
    ("nn.ConvTranspose2d(4, 6, 3, padding=1)", "torch.mean(self.conv_transpose(x), dim=(2, 3), keepdim=True)", False),
    # a mean over one spatial dim is not the whole output's
    ("nn.ConvTranspose2d(4, 6, 3)", "torch.mean(self.conv_transpose(x), dim=2, keepdim=True).amax(3, keepdim=True)",
     False),
])
def test_a_transposed_convolutions_global_mean_skips_the_convolution(home, conv, mean, taken):
    p = problem(CONV_MEAN.format(conv=conv, mean=mean), "[torch.rand(2, 4, 9, 7)]")
    sol, ref, new = run(p)
    assert any(r.startswith("convmean:") for r in sol.replaced) is taken, sol.describe()
    assert any("ConvTranspose2d" in k for k in sol.kept) is not taken, sol.describe()
    if taken:
        assert "_kb_convmean(x, " in sol.source
        x = torch.randn(3, 4, 5, 11)  # other shapes and signs than the problem's inputs
        with torch.no_grad():
            torch.testing.assert_close(new(x), ref(x), atol=1e-4, rtol=1e-4)


# -- pools next to a convolution (L2 78, L2 10 / 43 / 65) ------------------------------------------------

POOLS = '''
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = {conv}
        self.p1, self.p2 = {pools}

    def forward(self, x):
        x = self.p2(self.p1({pre}(self.conv(x))))
        return {post}
'''


@pytest.mark.parametrize("conv, pools, pre, post, inputs, generated", [
    # L2 78 in small: a transposed convolution, two max pools, a channel sum our reduce does; left to
    # cuDNN the pools would be all of the non-convolution work, and the judge rejects such a start
    ("nn.ConvTranspose3d(3, 4, 3, stride=2, padding=1)", "nn.MaxPool3d(2), nn.MaxPool3d(3)", "",
     "torch.sum(x, dim=1, keepdim=True)", "[torch.randn(2, 3, 6, 7, 6)]", True),
    # an activation on the full convolution output does more than the pools: they stay cuDNN's
    ("nn.Conv2d(3, 8, 3)", "nn.MaxPool2d(2), nn.AvgPool2d(2)", "torch.relu",
     "torch.tanh(x) * 2.0", "[torch.randn(2, 3, 12, 14)]", False),
])
def test_pools_are_generated_where_they_would_be_most_of_the_library_work(home, conv, pools, pre, post, inputs,
                                                                         generated):
    from autokernel.kb.fallback_rules import pools_dominate
    from autokernel.kb.solutions import trace_problem

    p = problem(POOLS.format(conv=conv, pools=pools, pre=pre, post=post), inputs)
    assert pools_dominate(trace_problem(p)) is generated
    sol, _, _ = run(p)
    assert any(r.startswith("pool:") for r in sol.replaced) is generated, sol.describe()
    assert not any(r.startswith("conv:") for r in sol.replaced), sol.describe()  # cuDNN keeps the convolution
    assert any("Conv" in k for k in sol.kept), sol.describe()


# -- CUDA-graph replay --------------------------------------------------------------------------------

def test_graph_default_and_the_eager_path_without_cuda(home):
    from autokernel.kb.replay import graph_default

    assert graph_default(1, 0) == 0  # one launch: nothing to save
    assert graph_default(10, 1 << 20) == 1  # 1 MiB copied against nine launches saved
    assert graph_default(3, 1 << 30) == 0  # 1 GiB copied each call costs more than it saves
    p = problem("class Model(nn.Module):\n    def forward(self, x):\n        return torch.relu(x) * 2.0 + 1.0",
                "[torch.randn(8, 16)]")
    sol, _, new = run(p)
    assert sol.graph == 0 and "KB_CUDA_GRAPH = 0" in sol.source  # one fused launch: nothing to save
    assert "'KB_CUDA_GRAPH': [0, 1]" in sol.source
    assert "return _kb_graphed(self, self._kb_forward, (x,))" in sol.source
    assert "_kb_graphs" not in vars(new)  # on the CPU the forward ran as it is


# -- the shrinker and the level scripts ----------------------------------------------------------------

def test_shrink_keeps_residues_divisors_and_derived_sizes():
    from autokernel.kb.shrink import shrink_code

    code = ("batch_size = 128\nn_head = 12\nn_embd = 768\nM = 8205\nK = 4096 * 2\nsizes = [16384, 100]\n"
            "bias_shape = (n_embd, 1)\nkernel_size = 3\n")
    out, changed = shrink_code(code, 64)
    ns = {}
    exec(out, ns)
    assert ns["batch_size"] == 2 and ns["kernel_size"] == 3 and ns["n_head"] == 12
    assert ns["n_embd"] % 12 == 0 and ns["n_embd"] <= 64
    assert ns["M"] % 32 == 8205 % 32 and ns["M"] % 2 == 1 and ns["K"] == 32
    assert ns["sizes"] == [32, 36] and ns["bias_shape"] == (ns["n_embd"], 1)
    assert set(changed) == {"batch_size", "n_embd", "M", "K", "sizes"}
    # L1 100: (batch, 32768) predictions times (batch,) targets broadcast only while batch == 32768
    hinge = "batch_size = 32768\ninput_shape = (32768,)\nsmall_batch = 16\n"
    for tie, batch in ((False, 2), (True, 8)):
        ns = {}
        exec(shrink_code(hinge, 16, tie_batch=tie)[0], ns)
        assert (ns["batch_size"], ns["input_shape"], ns["small_batch"]) == (batch, (8,), 2)


REPRESENTATIVE = {  # official problems these files stand for: L1 33, 35, 11, 12; L3 33, 39, 43
    "1_BatchNorm.py": ("class Model(nn.Module):\n    def __init__(self, c):\n        super().__init__()\n"
                       "        self.bn = nn.BatchNorm2d(c)\n\n    def forward(self, x):\n        return self.bn(x)",
                       "[torch.rand(4, 8, 6, 5)]", "[8]"),
    "2_GroupNorm.py": ("class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                       "        self.gn = nn.GroupNorm(2, 8)\n\n    def forward(self, x):\n        return self.gn(x)",
                       "[torch.rand(4, 8, 6, 5)]", "[]"),
    "3_Einsum.py": ("class Model(nn.Module):\n    def forward(self, A, B):\n"
                    "        return torch.einsum('bijl,lk->bijk', A, B)",
                    "[torch.rand(2, 3, 4, 16), torch.rand(16, 8)]", "[]"),
    "4_GRU.py": ("class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                 "        self.gru = nn.GRU(6, 8, 2)\n\n    def forward(self, x, h0):\n        return self.gru(x, h0)[1]",
                 "[torch.rand(5, 3, 6), torch.rand(2, 3, 8)]", "[]"),
    "5_Attention.py": (ATTN.format(mask="torch.tril(torch.ones(24, 24))").strip(), "[torch.randn(2, 20, 32)]",
                       "[32, 4, 24]"),
}


@pytest.fixture(scope="module")
def mini_checkout(tmp_path_factory):
    root = tmp_path_factory.mktemp("kbmini")
    (root / "level1").mkdir()
    for name, (body, inputs, init) in REPRESENTATIVE.items():
        (root / "level1" / name).write_text(HEAD + f"{body}\n\n\ndef get_inputs():\n    return {inputs}\n\n\n"
                                            f"def get_init_inputs():\n    return {init}\n")
    return root


def _script(name):
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"kb_script_{name}", ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_level_scan_finds_no_torch_only_start(home, mini_checkout, tmp_path, capsys):
    scan = _script("kb_starts")
    state = tmp_path / "starts.json"
    assert scan.main(["--kb-path", str(mini_checkout), "--levels", "1", "--state", str(state), "--kinds-only"]) == 0
    rows = json.loads(state.read_text())
    assert len(rows) == len(REPRESENTATIVE)
    assert [k for k, r in rows.items() if r["torch_only"]] == []
    assert {r["kind"] for r in rows.values()} == {"norm", "library", "rnn"}
    assert "| 1 | 5 | 0 |" in capsys.readouterr().out


@pytest.mark.parametrize("subset", [[33, 34, 35, 11, 12, 14], [39, 43, 44, 33, 46, 48]])
def test_official_subset_has_no_torch_only_start(home, subset):
    """The official problems these tests stand for, where a checkout is at hand (.kb/KernelBench or
    $KERNELBENCH_PATH): L1 33-35 norms, 11 einsum, 12 diagonal, 14 triangular; L3 39 GRU, 43 / 44
    attention, 33 stateful RNN, 46 NetVLAD (a device comparison in forward), 48 Mamba (einops)."""
    if 48 in subset:
        pytest.importorskip("einops")
    import os

    from autokernel.kb.problems import load_problems
    from autokernel.kb.solutions import KIND_TORCH, initial_solution

    path = os.environ.get("KERNELBENCH_PATH") or ROOT / ".kb" / "KernelBench"
    if not Path(path).is_dir():
        pytest.skip("no official KernelBench checkout")
    level = 1 if 34 in subset else 3
    starts = {p.problem_id: initial_solution(p) for p in load_problems("checkout", path, level=level, ids=subset)}
    assert {i: s.note for i, s in starts.items() if s.kind == KIND_TORCH} == {}


def test_generated_starts_compile_for_sm90(home):
    """Every new kernel family's launches, lowered to Triton IR for sm_90 in one compile process."""
    from autokernel.bench.gpu_compile import compile_for_gpu, record_launches
    from autokernel.kb.problems import load_source
    from autokernel.kb.solutions import initial_solution

    if torch.cuda.is_available():
        pytest.skip("the GPU tests compile these for real")
    launches = []
    conv_mean = CONV_MEAN.format(conv="nn.ConvTranspose2d(4, 6, 3)",
                                 mean="torch.mean(self.conv_transpose(x), dim=(2, 3), keepdim=True)")
    gemm_sum = GEMM_SUM.format(body="torch.mean(self.linear(x) - self.subtract, dim=1, keepdim=True)")
    more = [("6_Reductions.py", REDUCTIONS),
            ("7_ConvMean.py", (conv_mean, "[torch.rand(2, 4, 9, 7)]", "[]")),
            ("8_Exclusive.py", (EXCLUSIVE.format(head="torch.zeros_like"), "[torch.rand(6, 300)]", "[1]")),
            ("9_GemmSum.py", (gemm_sum, "[torch.rand(6, 24)]", "[]"))]
    for name, (body, inputs, init) in [*REPRESENTATIVE.items(), *more]:
        p = problem(body, inputs, init, name=name[:-3])
        sol = initial_solution(p)
        mod = load_source(sol.source, f"kb_start_cc_{p.code_hash}")
        torch.manual_seed(0)
        new = mod.ModelNew(*mod.get_init_inputs())
        with record_launches() as got, torch.no_grad():
            new(*mod.get_inputs())
            new.eval()
            new(*mod.get_inputs())
        launches += got
    names = {rec.name for rec in launches}
    assert {"_kb_stats_kernel", "_kb_stats_finish_kernel", "_kb_rnn_xw_kernel", "_kb_rnn_step_kernel",
            "_fa__attn_fwd", "_kb_convmean_sum_kernel", "_kb_convmean_out_kernel", "_kb_scan_kernel",
            "_kb_gemmsum_reduce_kernel", "_kb_gemmsum_gemv_kernel"} <= names
    assert compile_for_gpu(launches) == len(launches)


def test_level_runner_resumes_and_writes_results(home, mini_checkout, tmp_path, monkeypatch):
    """benchmarks/kb_levels.py: one phase per call, state kept, a search that fails or never finished
    twice is recorded, and RESULTS.md gets the tables between its markers (kept text around them stays)."""
    runner = _script("kb_levels")
    assert [runner.level_ids("L1.42,L2.76,5", lv) for lv in (1, 2)] == [[42, 5], [76, 5]]
    assert runner.level_ids("L1.42", 3) == [] and runner.level_ids("", 3) is None
    state, results = tmp_path / "state.json", tmp_path / "RESULTS.md"
    results.write_text("# Results\n\nearlier text\n")
    common = ["--kb-path", str(mini_checkout), "--levels", "1", "--problems", "3", "--state", str(state),
              "--results", str(results), "--home", str(tmp_path / "h"), "--search", "all", "-k", "1"]
    assert runner.main(common + ["--search", "none"]) == 0  # starts only: the search is left for a later call
    entry = json.loads(state.read_text())["problems"]["L1.3"]
    assert entry["start_done"] and entry["start"]["correct"] and entry["kind"] == "library"
    # the start's judge took the eager time the baselines phase timed, and timed none itself
    assert entry["baselines_done"] and entry["start"]["eager_us"] == entry["baselines"]["eager_us"] > 0
    assert "search_done" not in entry and "search: starts only of 3" in results.read_text()
    assert runner.main(common + ["--max-phases", "0"]) == 0
    assert "search_done" not in json.loads(state.read_text())["problems"]["L1.3"]
    with monkeypatch.context() as m:  # a GPU machine without the optuna wheel: the search fails, said so
        m.setitem(sys.modules, "optuna", None)
        assert runner.main(common) == 0
    entry = json.loads(state.read_text())["problems"]["L1.3"]
    # the proposer is built before any experiment: one ConfigError, no experiment row
    assert entry["search_done"] and "needs Optuna" in entry["search"]["error"]
    assert not entry["search"].get("experiments")
    assert "| search: ConfigError: the search agent needs Optuna" in results.read_text()
    data = json.loads(state.read_text())
    data["problems"]["L1.3"].update(search_done=False, search_tries=2)  # two device calls ended inside it
    state.write_text(json.dumps(data))
    assert runner.main(common) == 0
    entry = json.loads(state.read_text())["problems"]["L1.3"]
    assert entry["search_done"] and "did not finish" in entry["note"]
    text = results.read_text()
    assert text.startswith("# Results\n\nearlier text\n") and text.count(runner.BEGIN) == 1
    assert "| 1 | 5 | 1 | 1/5 (20%) |" in text and "| 3 | Einsum | library | yes |" in text
    assert "| 1 | before search | 0 |" in text
    # a second shard's state (another GPU's process) merged: its problem joins the tables
    other = tmp_path / "state.1.json"
    shard = {"problems": {"L1.1": {"level": 1, "id": 1, "name": "BatchNorm", "kind": "norm", "start_done": True,
                                   "search_done": True, "start": dict(entry["start"], speedup_vs_eager=1.5)}}}
    other.write_text(json.dumps(shard))
    data = json.loads(state.read_text())  # a CPU timing: pinned below 1x so fast_1 counts the shard's alone
    data["problems"]["L1.3"]["start"]["speedup_vs_eager"] = 0.5
    state.write_text(json.dumps(data))
    assert runner.main(common + ["--write-only", "--merge", str(other)]) == 0
    text = results.read_text()
    assert "| 1 | 5 | 2 | 2/5 (40%) | 20% |" in text and "| 1 | BatchNorm | norm | yes | 1.50 |" in text
    assert "search: -k 1 on all problems of 3." in text  # how the merged numbers were made, not the defaults


def test_level_script_resumes_from_the_state_folder(mini_checkout, tmp_path):
    """benchmarks/kb_levels.sh, as on the GPU machine but with no time to judge anything: the states of
    an earlier call are taken from the state folder and every part writes its state into $OUT."""
    import os
    import subprocess

    earlier = tmp_path / "state"
    earlier.mkdir()
    (earlier / "kb_state_0_2.json").write_text(json.dumps(
        {"args": "starts only", "problems": {"L1.9": {"level": 1, "id": 9, "name": "X", "start_done": True}}}))
    env = dict(os.environ, PYTHON=sys.executable, PYTHONPATH=str(ROOT), OUT=str(tmp_path / "out"),
               KB_PATH=str(mini_checkout), KB_STATE_DIR=str(earlier), KB_SHARD="0/2", KB_SEARCH="L1.3",
               KB_DEADLINE="0", KB_SEARCH_DEADLINE="0", KB_COMPILE_WORKERS="2")
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / "kb_levels.sh")], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    starts = json.loads((tmp_path / "out" / "kb_state_0_2.json").read_text())["problems"]
    assert starts["L1.9"]["start_done"] and "start_done" not in starts["L1.1"]
    search = json.loads((tmp_path / "out" / "kb_state_search.json").read_text())
    assert list(search["problems"]) == ["L1.3"] and search["args"] == "-k 3 on all problems of L1.3"
    assert "stopped before L1.3 start" in (tmp_path / "out" / "kb_search.log").read_text()
    assert "baselines: none, the deadline came first" in (tmp_path / "out" / "kb_starts.log").read_text()


@pytest.mark.gpu
def test_cuda_graph_replay_is_correct_when_inputs_change(home):
    """GPU: the second call with a signature captures, later ones replay; an input changed in place, a
    new input tensor, a new batch size and eval mode all give the eager answer, and no output storage
    is returned twice (the judge refuses a cached output)."""
    from autokernel.kb.problems import load_source
    from autokernel.kb.solutions import initial_solution

    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    p = problem(NORM.format(norm="nn.BatchNorm2d(8)", expr="torch.relu(self.n(x)) * 2.0 + x"),
                "[torch.rand(3, 8, 5, 7)]")
    sol = initial_solution(p)
    mod = load_source(sol.source, f"kb_start_graph_{p.code_hash}")
    mod.KB_CUDA_GRAPH = 1
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    ref = mod.Model().cuda()
    torch.manual_seed(0)
    new = mod.ModelNew().cuda()
    x = torch.rand(3, 8, 5, 7, device="cuda")
    seen = []
    with torch.no_grad():
        for step in range(6):
            if step == 3:
                x.mul_(3.0).add_(1.0)  # same tensor, new content
            if step == 4:
                x = torch.rand(5, 8, 5, 7, device="cuda")  # a new signature: eager, then captured
            if step == 5:
                ref.eval(), new.eval()
            got, want = new(x), ref(x)
            torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
            assert all(got.untyped_storage().data_ptr() != s for s in seen)
            seen.append(got.untyped_storage().data_ptr())
    graphs = vars(new)["_kb_graphs"]
    assert any(isinstance(v, tuple) for v in graphs.values())  # replayed at least one signature
    for (_, a), (_, b) in zip(ref.named_buffers(), new.named_buffers()):  # running stats: one update a call
        torch.testing.assert_close(b.float(), a.float(), atol=1e-5, rtol=1e-5)
