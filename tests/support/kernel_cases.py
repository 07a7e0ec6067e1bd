"""What the per-kernel tests (tests/test_kernels_*.py) share: a `Kernel` wraps one kernel type's spec
and starters and provides

* the reference check (`check`: float64 reference, shape/dtype/device, no NaN, the spec's tolerance),
  inputs (`gen`, `inputs`, `make`), starter loading with or without a config (`load`, `kernel_file`)
  and the module-scoped `triton_mod` / `cuda_mod` fixtures;
* spec sanity assertions (`assert_costs`: FLOP and byte counts, default-shape labels;
  `assert_kernel_names`: the bench's foreign-kernel matcher; `assert_starter_file`);
* test factories, each returning one pytest test function (parametrized and marked as the tests it
  replaced were) that a test module binds to a `test_*` name, so node ids stay
  `test_kernels_X.py::test_name[shape-dtype-backend]`:
  `correctness_test` (shapes x dtypes [x backends], each at the given scales, interpreter or GPU),
  `adversarial_test`, `gpu_scales_test`, `strided_views_test`, `configs_test`,
  `other_configs_test`, `cuda_compile_test`, `gpu_edges_and_scales_test`;
* the GPU speed-report pieces the test files' `__main__` scripts use (`bandwidth_report`,
  `tflops_table`).

Each test module keeps what is specific to its kernel type and calls these.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Callable, Iterable, Sequence

import pytest
import torch

from autokernel.bench.launches import is_foreign
from autokernel.cuda.build import compile_check, nvcc_available, toolchain_missing
from autokernel.kernelfile import import_kernel, parse_source, read_kernel_file, with_config
from autokernel.kernels import get_spec, starter_path

HAS_CUDA = torch.cuda.is_available()
DEVICE = "cuda" if HAS_CUDA else "cpu"
ALL_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# tl.dot on bf16 operands returns garbage under the interpreter: bf16 dot kernels are checked on the GPU only.
CPU_DTYPES = (torch.float32, torch.float16)
BACKENDS = ("triton", "cuda")


def _upcast(a):
    return a.double() if torch.is_tensor(a) and a.is_floating_point() else a


def row_kernel_configs(max_fused_cols: int) -> list[dict]:
    """Search-space points of the row-wise starters (softmax, layernorm, rmsnorm): the looping path
    (9000 columns loop with a ragged tail), small tiles with few elements per thread, big tiles."""
    return [{"MAX_FUSED_COLS": max_fused_cols, "LOOP_BLOCK": 1024},
            {"TILE_ELEMS": 1024, "ELEMS_PER_THREAD": 4, "MAX_WARPS": 8},
            {"TILE_ELEMS": 16384}]


def skip_long_bf16_rows(shape, dtype, backend):
    """A `skip` for row-wise kernels under the interpreter: rows past 32768 columns in bf16."""
    if shape["cols"] > 32768 and dtype == torch.bfloat16:
        return "the long-row path is covered in fp32/fp16; keeps the interpreter run short"
    return None


def skip_cuda_without_toolchain(shape, dtype, backend):
    """A `skip` for GPU tests of both backends: the CUDA one where extensions cannot be built."""
    if backend == "cuda" and toolchain_missing():
        return f"cannot build CUDA extensions: {toolchain_missing()}"
    return None


def _make_test(body: Callable, argnames: Sequence[str], marks: Sequence = (), doc: str | None = None):
    """A test function taking exactly `argnames` (fixtures and parameters, as pytest reads them from
    its signature) and calling `body(**kwargs)`; `marks` are applied as decorators listed top-down."""

    def test(**kwargs):
        body(**kwargs)

    test.__signature__ = inspect.Signature(
        [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in argnames])
    test.__doc__ = doc
    for mark in reversed(list(marks)):
        test = mark(test)
    return test


class Kernel:
    """One kernel type: its spec, its starters, and the shared checks parametrized for it.

    out_shape(args) gives the expected output shape (default: the reference's); out_dtype the
    expected output dtype (default: the input dtype)."""

    def __init__(self, name: str, *, out_shape: Callable | None = None, out_dtype: torch.dtype | None = None):
        self.name = name
        self.spec = get_spec(name)
        self.out_shape = out_shape
        self.out_dtype = out_dtype

    # ------------------------------------------------------------ reference check and inputs

    def check(self, out: torch.Tensor, args: tuple, dtype: torch.dtype, scale: str = "normal") -> None:
        """`out` against the spec's reference evaluated in float64 on the same arguments, within the
        spec's tolerance for that dtype and input scale (as the bench judges)."""
        ref = self.spec.reference(*[_upcast(a) for a in args])
        shape = ref.shape if self.out_shape is None else self.out_shape(args)
        assert out.shape == shape and out.dtype == (self.out_dtype or dtype) and out.device == args[0].device
        assert not torch.isnan(out).any()
        atol, rtol = self.spec.tolerance(dtype, scale)
        torch.testing.assert_close(out.double(), ref.double(), atol=atol, rtol=rtol)

    @staticmethod
    def gen(seed: int, device: str = DEVICE) -> torch.Generator:
        return torch.Generator(device=device).manual_seed(seed)

    def make(self, shape: dict, dtype, gen, scale: str = "normal", device: str = DEVICE):
        return self.spec.make_inputs(shape, dtype, device, gen, scale)

    def inputs(self, shape: dict, dtype, scale: str = "normal", seed: int = 0, device: str = DEVICE):
        """Inputs from a fresh generator seeded with `seed`."""
        return self.make(shape, dtype, self.gen(seed, device), scale, device)

    def check_cases(self, mod, cases: Iterable[tuple[dict, str]], dtype, gen) -> None:
        """Every (shape, scale) in `cases`, inputs drawn from `gen` in turn, checked."""
        for shape, scale in cases:
            args = self.make(shape, dtype, gen, scale, gen.device.type)
            self.check(mod.kernel_fn(*args), args, dtype, scale)

    # ------------------------------------------------------------ starters

    def kernel_file(self, backend: str, config: dict | None = None, tmp_path: Path | None = None):
        """The starter's kernel file; with `config`, the starter with those values (written under
        `tmp_path` when given, else parsed from source, which imports through the AutoKernel home)."""
        path = starter_path(self.name, backend)
        if not config:
            return read_kernel_file(path)
        src = with_config(path.read_text(), config)
        if tmp_path is None:
            return parse_source(src)
        target = Path(tmp_path) / f"{self.name}_{backend}_{abs(hash(tuple(sorted(config.items()))))}.py"
        target.write_text(src)
        return read_kernel_file(target)

    def load(self, backend: str, config: dict | None = None, tmp_path: Path | None = None):
        return import_kernel(self.kernel_file(backend, config, tmp_path))

    def fixtures(self, own_home: bool = False):
        """(triton_mod, cuda_mod): both module-scoped starter fixtures, for a test module to bind."""
        return self.triton_fixture(), self.cuda_fixture(own_home)

    def triton_fixture(self):
        """Module-scoped fixture `triton_mod`: the Triton starter."""

        @pytest.fixture(scope="module", name="triton_mod")
        def triton_mod():
            return self.load("triton")

        return triton_mod

    def cuda_fixture(self, own_home: bool = False):
        """Module-scoped fixture `cuda_mod`: the CUDA starter; with `own_home`, built on first call into
        a temporary AutoKernel home's cache."""

        @pytest.fixture(scope="module", name="cuda_mod")
        def cuda_mod(tmp_path_factory):
            if not own_home:
                yield self.load("cuda")
                return
            mp = pytest.MonkeyPatch()
            mp.setenv("AUTOKERNEL_HOME", str(tmp_path_factory.mktemp("akhome")))
            yield self.load("cuda")
            mp.undo()

        return cuda_mod

    # ------------------------------------------------------------ spec sanity

    def assert_costs(self, shape: dict, *, flops: dict | None = None, bytes: dict | None = None,
                     labels: Iterable[str]) -> None:
        """spec.flops / spec.bytes at `shape` equal the given {dtype: count}; `labels` are among the
        default shapes' labels."""
        assert flops or bytes
        for dtype, value in (flops or {}).items():
            assert self.spec.flops(shape, dtype) == value, ("flops", dtype)
        for dtype, value in (bytes or {}).items():
            assert self.spec.bytes(shape, dtype) == value, ("bytes", dtype)
        labels = set(labels)
        assert labels and labels <= {self.spec.shape_label(x) for x in self.spec.default_shapes}

    def assert_kernel_names(self, own: Iterable[str] = (), foreign: Iterable[str] = ()) -> None:
        """The bench's matcher takes `foreign` launches as library kernels and `own` as ours."""
        pats = self.spec.library_kernel_patterns
        for name in foreign:
            assert is_foreign(name, pats), name
        for name in own:
            assert not is_foreign(name, pats), name

    def assert_starter_file(self, backend: str = "triton", search_space: Iterable[str] = ()):
        kf = read_kernel_file(starter_path(self.name, backend))
        assert kf.kernel_type == self.name and kf.backend == backend and kf.deterministic
        assert set(search_space) <= set(kf.search_space)
        return kf

    # ------------------------------------------------------------ test factories

    def correctness_test(self, *, backend, shapes: Sequence[dict], dtypes=ALL_DTYPES, scales=("normal",),
                         seed: int | Callable[[dict], int] = 0, gpu: bool = False,
                         skip: Callable | None = None, doc: str | None = None):
        """Parametrized over shape (ids: shape labels) and dtype, and over backend when `backend` is a
        tuple (else the `<backend>_mod` fixture): the starter at each of `scales` in turn, inputs from
        one generator seeded with `seed` (or seed(shape)), on the GPU with `gpu` (marked `gpu`), else
        on DEVICE. `skip(shape, dtype, backend)` returning a reason skips that case."""
        device = "cuda" if gpu else DEVICE

        def body(request, shape, dtype, backend=backend):
            reason = skip(shape, dtype, backend) if skip else None
            if reason:
                pytest.skip(reason)
            mod = request.getfixturevalue(f"{backend}_mod")
            gen = self.gen(seed(shape) if callable(seed) else seed, device)
            self.check_cases(mod, [(shape, s) for s in scales], dtype, gen)

        marks = [pytest.mark.gpu] if gpu else []
        argnames = ["request", "shape", "dtype"]
        if not isinstance(backend, str):
            marks.append(pytest.mark.parametrize("backend", list(backend)))
            argnames.append("backend")
        marks += [pytest.mark.parametrize("dtype", list(dtypes)),
                  pytest.mark.parametrize("shape", list(shapes), ids=self.spec.shape_label)]
        return _make_test(body, argnames, marks, doc)

    def adversarial_test(self, shapes: Sequence[dict], dtypes=ALL_DTYPES, seed: int = 0):
        """Parametrized over dtype and adversarial scale: the Triton starter at each of `shapes`,
        inputs from a fresh generator seeded with `seed`."""

        def body(triton_mod, scale, dtype):
            for shape in shapes:
                self.check_cases(triton_mod, [(shape, scale)], dtype, self.gen(seed))

        return _make_test(body, ["triton_mod", "scale", "dtype"],
                          [pytest.mark.parametrize("dtype", list(dtypes)),
                           pytest.mark.parametrize("scale", list(self.spec.adversarial))])

    def gpu_scales_test(self, backend: str, shape: dict, seed: int, dtypes=ALL_DTYPES):
        """On the GPU, parametrized over dtype: `<backend>_mod` at `shape`, every adversarial scale."""

        def body(request, dtype):
            mod = request.getfixturevalue(f"{backend}_mod")
            self.check_cases(mod, [(shape, s) for s in self.spec.adversarial], dtype, self.gen(seed, "cuda"))

        return _make_test(body, ["request", "dtype"],
                          [pytest.mark.gpu, pytest.mark.parametrize("dtype", list(dtypes))])

    def check_row_views(self, mod, x, rest: tuple, views, dtype) -> None:
        """Row-wise kernels (x, *per-column params, scalars): each view of x with the per-column
        parameters cut to its width."""
        for view in views:
            cols = view.shape[1]
            args = (view, *[a[:cols] if torch.is_tensor(a) else a for a in rest])
            self.check(mod.kernel_fn(*args), args, dtype)

    def strided_views_test(self, dtypes=CPU_DTYPES):
        """Row-wise kernels, parametrized over dtype: the Triton starter on column slices, column
        strides, a transposed view and row strides of x, and, where the kernel takes per-column
        parameters (weight, bias), on strided ones."""

        def body(triton_mod, dtype):
            x, *rest = self.inputs({"rows": 6, "cols": 300}, dtype)
            views = (x[:, 20:220], x[:, ::3], x.t()[::7].t()[:5], x[::2])
            self.check_row_views(triton_mod, x, tuple(rest), views, dtype)
            if any(torch.is_tensor(a) for a in rest):
                wide = self.inputs({"rows": 2, "cols": 600}, dtype)[1:]
                args = (x, *[a[::2] if torch.is_tensor(a) else a for a in wide])
                self.check(triton_mod.kernel_fn(*args), args, dtype)

        return _make_test(body, ["triton_mod", "dtype"], [pytest.mark.parametrize("dtype", list(dtypes))])

    def configs_test(self, configs: Sequence[dict],
                     shapes: Sequence[dict] = ({"rows": 3, "cols": 9000}, {"rows": 33, "cols": 100}), seed: int = 3):
        """Parametrized over `configs`: the Triton starter with each, in fp32 at every shape."""

        def body(home, config):
            mod = self.load("triton", config)
            for shape in shapes:
                args = self.inputs(shape, torch.float32, seed=seed)
                self.check(mod.kernel_fn(*args), args, torch.float32)

        return _make_test(body, ["home", "config"], [pytest.mark.parametrize("config", list(configs))])

    def other_configs_test(self, plan: Sequence[tuple[dict, Sequence[tuple[dict, torch.dtype, str]]]], seed: int,
                           check_valid: bool = False, doc: str | None = None):
        """One test: for each (config, [(shape, dtype, scale), ...]) in `plan`, the Triton starter with
        that config (written under tmp_path) checked at every case, inputs from one generator; with
        `check_valid`, the configured file also passes the starter's own valid_config."""

        def body(tmp_path):
            gen = self.gen(seed)
            for config, cases in plan:
                kf = self.kernel_file("triton", config, tmp_path)
                mod = import_kernel(kf)
                if check_valid:
                    assert mod.valid_config(dict(kf.config))
                for shape, dtype, scale in cases:
                    self.check_cases(mod, [(shape, scale)], dtype, gen)

        return _make_test(body, ["tmp_path"], doc=doc)

    def cuda_compile_test(self, other: dict | None = None, slow: bool = False):
        """The CUDA starter's device code and host wrapper pass nvcc and the C++ check against torch at
        the default config, and the device code again at `other` (which valid_config accepts).
        Skipped without nvcc; marked `nvcc` (no Triton in it: CI's second pass, under the newest
        Triton, leaves it out), and `slow` with `slow`."""

        def body():
            mod = self.load("cuda")
            assert mod.KERNEL_TYPE == self.name and mod.BACKEND == "cuda"
            defines = mod._defines() if hasattr(mod, "_defines") else mod.DEFINES
            compile_check(mod.CUDA_SRC, mod.CPP_SRC, defines=defines, functions=mod.FUNCTIONS)
            if other is not None:
                assert mod.valid_config(other)
                compile_check(mod.CUDA_SRC, None, defines=other)

        marks = [pytest.mark.nvcc] + ([pytest.mark.slow] if slow else [])
        marks.append(pytest.mark.skipif(not nvcc_available(), reason="nvcc not found"))
        return _make_test(body, [], marks)

    def gpu_edges_and_scales_test(self, adversarial_shape: dict, extra: Callable | None = None):
        """Row-wise kernels on the GPU, parametrized over backend (skipped when CUDA extensions cannot
        be built): in every dtype, the small and edge shapes, every adversarial scale at
        `adversarial_shape`, strided views; then `extra(mod, dtype)`."""

        def body(request, backend):
            if backend == "cuda" and toolchain_missing():
                pytest.skip(f"cannot build CUDA extensions: {toolchain_missing()}")
            mod = request.getfixturevalue(f"{backend}_mod")
            for dtype in ALL_DTYPES:
                for shape in self.spec.edge_shapes + self.spec.small_shapes:
                    args = self.inputs(shape, dtype)
                    self.check(mod.kernel_fn(*args), args, dtype)
                for scale in self.spec.adversarial:
                    args = self.inputs(adversarial_shape, dtype, scale)
                    self.check(mod.kernel_fn(*args), args, dtype, scale)
                x, *rest = self.inputs({"rows": 64, "cols": 5000}, dtype)
                self.check_row_views(mod, x, tuple(rest), (x[:, 8:4008], x[:, ::2], x[::3]), dtype)
                if extra is not None:
                    extra(mod, dtype)

        return _make_test(body, ["request", "backend"],
                          [pytest.mark.gpu, pytest.mark.parametrize("backend", list(BACKENDS))])

    # ------------------------------------------------------------ GPU speed reports (scripts, not tests)

    def load_backends(self, emit: Callable[[str], None], probe_inputs: bool = True) -> dict:
        """{"triton": module, "cuda": module}; the CUDA starter built on a small shape first and left
        out (with a line saying why) when that fails."""
        mods = {"triton": self.load("triton")}
        try:
            mods["cuda"] = self.load("cuda")
            if probe_inputs:
                mods["cuda"].kernel_fn(*self.spec.make_inputs(self.spec.small_shapes[0], torch.float16, "cuda", None))
        except Exception as exc:  # report, keep timing the rest
            mods.pop("cuda", None)
            emit(f"cuda starter unavailable: {type(exc).__name__}: {str(exc)[-400:]}")
        return mods

    def tflops(self, fn, args, shape, dtype, warmup: int = 50, rep: int = 300) -> float:
        import triton.testing

        ms = triton.testing.do_bench(lambda: fn(*args), warmup=warmup, rep=rep)
        return self.spec.flops(shape, dtype) / (ms * 1e-3) / 1e12

    def tflops_report(self, baseline: str, sweep: Callable | None = None, warmup: int = 50, rep: int = 300) -> None:
        """The GPU speed report of a compute-bound kernel: `tflops_table` for both starters (plus
        `sweep(mods, gen, emit)` when given), printed and written to $OUT/<kernel>_speed.txt."""
        import os

        lines = []

        def emit(line):
            print(line, flush=True)
            lines.append(line)

        mods = self.load_backends(emit)
        emit(f"device {torch.cuda.get_device_name()} torch {torch.__version__}")
        gen = torch.Generator(device="cuda").manual_seed(0)
        self.tflops_table(mods, emit, baseline, gen, warmup=warmup, rep=rep)
        if sweep is not None:
            sweep(mods, gen, emit)
        if os.environ.get("OUT"):
            Path(os.environ["OUT"], f"{self.name}_speed.txt").write_text("\n".join(lines) + "\n")

    def tflops_table(self, mods: dict, emit, baseline: str, gen, dtypes=(torch.bfloat16, torch.float16, torch.float32),
                     warmup: int = 50, rep: int = 300) -> None:
        """One line per default shape and dtype: the reference's TF/s (`baseline`) and each module's."""
        for dtype in dtypes:
            for s in self.spec.default_shapes:
                args = self.spec.make_inputs(s, dtype, "cuda", gen)
                ref = self.tflops(self.spec.reference, args, s, dtype, warmup, rep)
                row = f"{self.spec.shape_label(s):>18} {str(dtype):>15} {baseline} {ref:6.1f} TF/s"
                for name, mod in mods.items():
                    try:
                        t = self.tflops(mod.kernel_fn, args, s, dtype, warmup, rep)
                        row += f" | {name} {t:6.1f} TF/s ({100 * t / ref:5.1f}%)"
                    except Exception as exc:
                        row += f" | {name} failed: {type(exc).__name__}: {str(exc)[:200]}"
                emit(row)

    def bandwidth_report(self, eager, dtype: torch.dtype, sweep: dict | None) -> None:
        """Starters vs eager and torch.compile at the default shapes, as fractions of the measured copy
        bandwidth (read+write of a 1 GiB copy), one line each; `sweep` walks Triton tunables too."""
        import itertools
        import tempfile

        from triton.testing import do_bench

        def emit(line: str) -> None:
            print(line, flush=True)

        src = torch.empty(2**28, dtype=torch.float32, device="cuda")
        dst = torch.empty_like(src)
        copy_gbps = 2 * src.numel() * 4 / do_bench(lambda: dst.copy_(src), rep=200) / 1e6
        del src, dst
        emit(f"{torch.cuda.get_device_name()} torch {torch.__version__} copy {copy_gbps:.0f} GB/s")
        fns = {"eager": eager, "compile": torch.compile(eager, mode="max-autotune-no-cudagraphs")}
        for backend in BACKENDS:
            try:
                fns[backend] = self.load(backend).kernel_fn
            except Exception as exc:  # report and go on: one backend failing must not hide the other
                emit(f"{backend} starter unavailable: {type(exc).__name__}: {str(exc)[-300:]}")
        tmp = Path(tempfile.mkdtemp())
        if sweep:
            base = self.kernel_file("triton").config
            for values in itertools.product(*sweep.values()):
                cfg = dict(zip(sweep, values))
                try:
                    mod = self.load("triton", cfg, tmp)
                    if mod.valid_config(dict(base, **cfg)):
                        fns["triton " + ",".join(f"{k}={v}" for k, v in cfg.items())] = mod.kernel_fn
                except Exception as exc:
                    emit(f"config {cfg} failed to load: {exc}")
        for shape in self.spec.default_shapes:
            gen = torch.Generator(device="cuda").manual_seed(0)
            args = self.spec.make_inputs(shape, dtype, "cuda", gen)
            torch.cuda.synchronize()
            nbytes = self.spec.bytes(shape, dtype)
            label = self.spec.shape_label(shape)
            for name, fn in fns.items():
                try:
                    fn(*args)  # builds / autotunes outside the timed region
                    torch.cuda.synchronize()
                    ms = do_bench(lambda: fn(*args), rep=200)
                except Exception as exc:
                    emit(f"{self.name} {label} {name}: failed {type(exc).__name__}: {str(exc)[-200:]}")
                    continue
                gbps = nbytes / ms / 1e6
                emit(f"{self.name} {label} {str(dtype)[6:]} {name:10s} {ms * 1e3:9.1f} us "
                     f"{gbps:7.0f} GB/s {100 * gbps / copy_gbps:5.1f}% of copy")
