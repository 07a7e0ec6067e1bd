"""The generated KernelBench starts of test_kb_ops.py compiled by Triton for the GPU and run there
against the reference Model on the same device (TF32 off, as the judge has it): the interpreter
on the CPU checks their logic, this checks that they compile and run on the card. GPU only."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.gpu, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

HEAD = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\n"
MODEL = """class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = {init}
        self.bias = nn.Parameter(torch.randn(16, 1, 1))
        self.triplet = nn.TripletMarginLoss(margin=0.7)

    def forward(self, {args}):
        return {expr}


def get_inputs():
    return [{inputs}]


def get_init_inputs():
    return []
"""

CASES = {
    # name: (init, args, expr, inputs, tolerance)
    "rms-channels": ("nn.Identity()", "x", "x / torch.sqrt(torch.mean(x ** 2, dim=1, keepdim=True) + 1e-5)",
                     "torch.randn(4, 64, 33, 65)", 1e-5),
    "rms-bf16-last": ("nn.Identity()", "x", "x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)",
                      "torch.randn(64, 4096).bfloat16()", 2e-2),
    "l2-norm": ("nn.Identity()", "x", "x / torch.norm(x, p=2, dim=1, keepdim=True)", "torch.randn(16, 5000)", 1e-5),
    "frobenius": ("nn.Identity()", "x", "x / torch.norm(x, p='fro')", "torch.randn(64, 3000)", 1e-5),
    "mse": ("nn.Identity()", "p, t", "torch.mean((p - t) ** 2)", "torch.randn(512, 4096), torch.randn(512, 4096)", 1e-4),
    "hinge": ("nn.Identity()", "p, t", "torch.mean(torch.clamp(1 - p * t, min=0))",
              "torch.randn(256, 1024), torch.randint(0, 2, (1024,)).float() * 2 - 1", 1e-4),
    "huber": ("nn.Identity()", "p, t", "F.smooth_l1_loss(p, t)", "torch.randn(300, 777), torch.randn(300, 777)", 1e-4),
    "mingpt-gelu": ("nn.Identity()", "x",
                    "0.5 * x * (1.0 + torch.tanh(0.7978845608 * (x + 0.044715 * torch.pow(x, 3.0))))",
                    "torch.randn(1000, 1000)", 1e-5),
    "conv-relu-bias": ("nn.Conv2d(3, 16, 3)", "x", "torch.sigmoid(torch.relu(self.c(x)) * 2.0) + self.bias",
                       "torch.randn(4, 3, 40, 41)", 1e-4),
    "l1-norm": ("nn.Identity()", "x", "x / torch.sum(torch.abs(x), dim=1, keepdim=True)", "torch.randn(32, 3000)", 1e-5),
    "argmax-ties": ("nn.Identity()", "x", "torch.argmax(x, dim=1)", "torch.randint(0, 5, (16, 3000, 9)).float()", 0),
    "max-min-prod": ("nn.Identity()", "x", "(torch.max(x, 2)[0], torch.min(x, 0, keepdim=True).indices, "
                     "torch.prod(1.0 + 0.01 * x, 1))", "torch.randn(40, 300, 70)", 1e-4),
    "log-softmax": ("nn.Identity()", "x", "(F.log_softmax(x * 30.0, dim=-1), torch.log_softmax(x[:, :200], 0))",
                    "torch.randn(64, 40000)", 1e-3),
    "selu-hardsigmoid": ("nn.Identity()", "x", "torch.selu(x) + F.hardsigmoid(x * 2.0)", "torch.randn(999, 1001)", 1e-5),
    "kl": ("nn.Identity()", "p, t", "F.kl_div(torch.log(p), t, reduction='batchmean')",
           "torch.randn(128, 4096).softmax(-1), torch.randn(128, 4096).softmax(-1)", 1e-4),
    "cosine": ("nn.Identity()", "p, t", "torch.mean(1 - F.cosine_similarity(p, t, dim=1))",
               "torch.randn(128, 4096), torch.randn(128, 4096)", 1e-4),
    "triplet": ("nn.Identity()", "p, t", "self.triplet(p, t, t * 0.5 + 0.1)",
                "torch.randn(128, 4096), torch.randn(128, 4096)", 1e-4),
    "conv2d": ("nn.Conv2d(16, 70, 3, stride=2, padding=1)", "x", "self.c(x)", "torch.randn(4, 16, 33, 34)", 1e-4),
    "conv2d-fp16": ("nn.Conv2d(16, 64, 3, padding=1).half()", "x", "self.c(x)", "torch.randn(4, 16, 32, 32).half()",
                    1e-2),
    "conv1d-dilated": ("nn.Conv1d(8, 12, 5, dilation=2)", "x", "self.c(x)", "torch.randn(4, 8, 300)", 1e-4),
    "conv3d": ("nn.Conv3d(4, 8, 3, padding=1)", "x", "self.c(x)", "torch.randn(2, 4, 9, 10, 11)", 1e-4),
    "depthwise": ("nn.Conv2d(32, 32, 3, groups=32, padding=1)", "x", "self.c(x)", "torch.randn(4, 32, 40, 40)", 1e-4),
    "conv-transpose": ("nn.ConvTranspose2d(16, 8, 3, stride=2, padding=1, output_padding=1)", "x", "self.c(x)",
                       "torch.randn(4, 16, 20, 21)", 1e-4),
    "maxpool": ("nn.MaxPool2d(3, stride=2, padding=1, ceil_mode=True)", "x", "self.c(x)", "torch.randn(4, 16, 65, 66)", 0),
    "avgpool": ("nn.AvgPool3d(3, stride=2, padding=1, count_include_pad=False)", "x", "self.c(x)",
                "torch.randn(2, 8, 17, 18, 19)", 1e-5),
}


@pytest.mark.parametrize("name", list(CASES))
def test_generated_start_runs_on_the_gpu(home, name):
    from autokernel.kb.problems import Problem, load_source
    from autokernel.kb.solutions import KIND_TORCH, initial_solution

    init, args, expr, inputs, tol = CASES[name]
    code = HEAD + MODEL.format(init=init, args=args, expr=expr, inputs=inputs)
    p = Problem("checkout", 1, 1, f"gpu_{name.replace('-', '_')}", code)
    sol = initial_solution(p)
    assert sol.kind != KIND_TORCH, sol.note
    mod = load_source(sol.source, f"kb_gpu_{p.code_hash}")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    ref = mod.Model().cuda()
    torch.manual_seed(0)
    new = mod.ModelNew().cuda()
    torch.manual_seed(1)
    xs = [a.cuda() if isinstance(a, torch.Tensor) else a for a in mod.get_inputs()]
    with torch.no_grad():
        want, got = ref(*xs), new(*xs)
    want, got = (want, got) if isinstance(want, tuple) else ((want,), (got,))
    for w, g in zip(want, got):
        assert g.dtype == w.dtype and g.shape == w.shape and g.device.type == "cuda"
        torch.testing.assert_close(g, w, atol=tol, rtol=tol)
