"""The lean launch path: its cache key separates every signature Triton compiles differently, and
the plain path runs whenever the fast one does not apply (the interpreter here)."""

import pytest
import torch
import triton
import triton.language as tl

from autokernel.kernels import launcher
from autokernel.kernels.launcher import cdiv, launch, next_power_of_2


def test_host_helpers_match_triton():
    for n in [-3, 0, 1, 2, 3, 15, 16, 17, 1000, 2**20 + 1]:
        assert next_power_of_2(n) == (triton.next_power_of_2(n) if n > 0 else 0)
    for a, b in [(0, 4), (1, 4), (4, 4), (5, 4), (1023, 128), (1024, 128)]:
        assert cdiv(a, b) == -(-a // b) == (a + b - 1) // b


def test_key_tells_apart_what_triton_compiles_apart():
    key = launcher._signature_key
    x = torch.zeros(64, dtype=torch.float16)
    y = torch.zeros(64, dtype=torch.float32)
    assert key((x, 16, 1.5)) == key((x, 16, 2.5))  # float values are not specialised
    assert key((x, 16)) != key((y, 16))  # dtype
    assert key((x, 16)) != key((x[1:], 16))  # 16-byte alignment of the pointer
    assert key((x, 16)) != key((x, 17))  # ints are specialised by value (== 1, % 16)
    assert key((x, True)) != key((x, 1))  # an i1 and an i32 are different kernels although True == 1
    assert key((x, None)) == (key((x,))[0], None)
    assert key((x, 1.0)) != key((x, 1))  # an f32 argument and an int one


def test_unkeyable_arguments_take_the_plain_path():
    class Sub(torch.Tensor):
        pass

    x = torch.zeros(4)
    assert launcher._signature_key((x.as_subclass(Sub), 1)) == ()
    assert launcher._signature_key((x, torch.float16)) == ()
    assert launcher._signature_key((x, "s")) == ()


@triton.jit
def _scale(x_ptr, y_ptr, n, a, FLAG: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    v = tl.load(x_ptr + offs, mask=m)
    if FLAG:
        v = v * a
    tl.store(y_ptr + offs, v, mask=m)


def _device():
    return "cuda" if torch.cuda.is_available() else "cpu"


@pytest.mark.parametrize("flag", [False, True])
def test_launch_matches_the_plain_launch_on_repeated_calls(flag):
    n = 1000
    x = torch.randn(n, device=_device())
    for a in (2.0, 3.0, -0.5):  # repeated calls: the second on is the cached path on a GPU
        y = torch.empty_like(x)
        launch(_scale, (cdiv(n, 256),), x, y, n, a, FLAG=flag, BLOCK=256)
        torch.testing.assert_close(y, x * a if flag else x)
    launcher.clear()


@pytest.mark.gpu
def test_cached_launches_still_call_a_launch_hook():
    """Empty hook chains are skipped on the cached path; a hook someone adds (a profiler) still runs."""
    from triton import knobs

    n = 256
    x = torch.randn(n, device="cuda")
    y = torch.empty_like(x)
    for _ in range(2):
        launch(_scale, (1,), x, y, n, 2.0, FLAG=True, BLOCK=256)
    seen = []
    hook = seen.append
    chain = knobs.runtime.launch_enter_hook
    if hasattr(chain, "add"):
        chain.add(hook)
    else:  # a Triton whose hook is a plain callable
        knobs.runtime.launch_enter_hook = hook
    try:
        launch(_scale, (1,), x, y, n, 3.0, FLAG=True, BLOCK=256)
        torch.cuda.synchronize()
    finally:
        if hasattr(chain, "remove"):
            chain.remove(hook)
        else:
            knobs.runtime.launch_enter_hook = chain
    assert len(seen) == 1 and seen[0].get()["name"] == "_scale"  # a LazyDict, as Triton passes it
    torch.testing.assert_close(y, x * 3.0)
    launcher.clear()


def test_a_prepared_launch_is_the_launch_with_its_rest_fixed():
    n = 1000
    x = torch.randn(n, device=_device())
    run = launcher.Prepared(_scale, (cdiv(n, 256),), (n, 2.5), FLAG=True, BLOCK=256)
    for _ in range(3):  # on a GPU the second call on skips the keyed lookup
        y = torch.empty_like(x)
        run(x, y)
        torch.testing.assert_close(y, x * 2.5)
    launcher.clear()


@pytest.mark.gpu
def test_a_prepared_launch_rekeys_when_triton_would_compile_another_kernel():
    """The fixed-argument path compares each tensor's dtype, alignment and device with its first call's:
    a misaligned view, another dtype or a clear() goes through the keyed launch again, and still
    computes the right values."""
    n = 1000
    base = torch.randn(n + 8, device="cuda")
    run = launcher.Prepared(_scale, (cdiv(n, 256),), (n, -1.5), FLAG=True, BLOCK=256)
    x = base[:n]
    for _ in range(2):
        y = torch.empty(n, device="cuda")
        run(x, y)
    assert run._entry is not None  # the second call ran through the remembered kernel
    first = run._entry[3]
    torch.testing.assert_close(y, x * -1.5)
    x1 = base[1:n + 1]  # 4 bytes off: not 16-byte aligned, another specialisation
    y1 = torch.empty(n, device="cuda")
    run(x1, y1)
    torch.testing.assert_close(y1, x1 * -1.5)
    assert run._entry[3] is not first
    xh = x.half()
    yh = torch.empty(n, device="cuda", dtype=torch.half)
    run(xh, yh)
    torch.testing.assert_close(yh, xh * -1.5)
    launcher.clear()
    assert run._entry[0] != launcher._generation  # forgotten: the next call is keyed again
    y2 = torch.empty(n, device="cuda")
    run(x, y2)
    torch.testing.assert_close(y2, x * -1.5)
    launcher.clear()
