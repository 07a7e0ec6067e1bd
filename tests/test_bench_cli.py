"""`autokernel bench` end to end on the CPU: the table / JSON, the experiment row, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from autokernel.store import Store

HAS_CUDA = torch.cuda.is_available()

FAULTS = Path(__file__).parent / "faults"


@pytest.mark.timeout(300)
def test_bench_good_file_records_a_baseline_experiment(home, run_cli):
    code, out, err = run_cli("bench", str(FAULTS / "good.py"), "--quick", "--shape", "5x300", "--timeout", "120")
    assert code == 0, err
    assert "smoke" in out and "edge" in out and "pass" in out
    assert "interpreter" in out and "not GPU" in out
    with Store(home.db) as store:
        exps = store.list_experiments()
        assert len(exps) == 1
        e = exps[0]
        assert (e.kernel_type, e.backend, e.status, e.correctness) == ("reduce", "triton", "baseline", "PASS")
        assert e.stage_smoke == e.stage_edge == "pass"
        assert e.latency_us is None  # no GPU timing on the CPU
        assert json.loads(e.config_json) == {"BLOCK": 1024, "NUM_WARPS": 4}
        assert store.get_run(e.run_id).kind == "bench"


@pytest.mark.timeout(300)
def test_bench_json_and_nonzero_exit_for_an_incorrect_kernel(home, run_cli):
    from autokernel.errors import IncorrectKernelError

    code, out, err = run_cli("bench", str(FAULTS / "nan_output.py"), "--quick", "--json", "--timeout", "60")
    assert code == IncorrectKernelError.exit_code
    data = json.loads(out)
    assert data["result"]["outcome"] == "incorrect"
    assert data["result"]["stages"][0]["status"] == "fail"
    assert "NaN" in err
    with Store(home.db) as store:
        (e,) = store.list_experiments()
        assert (e.status, e.correctness, e.stage_smoke) == ("incorrect", "FAIL", "fail")
        assert "NaN" in e.error


@pytest.mark.timeout(300)
def test_bench_without_a_gpu_compiles_for_sm90(home, run_cli):
    """A kernel the interpreter runs correctly but Triton's compiler rejects fails `bench` on the CPU
    too (the gpu-compile stage), unless --no-gpu-compile asks for the interpreter's verdict alone."""
    from autokernel.errors import IncorrectKernelError

    if HAS_CUDA:
        pytest.skip("with a GPU the kernel is compiled for real")
    path = str(FAULTS / "gpu_uncompilable.py")
    code, out, err = run_cli("bench", path, "--quick", "--json", "--timeout", "120")
    assert code == IncorrectKernelError.exit_code
    res = json.loads(out)["result"]
    assert res["outcome"] == "compile_error" and res["stages"][-1]["name"] == "gpu-compile"
    assert "Loop-carried variable offs" in res["error"] and "compile_error" in err
    code, out, err = run_cli("bench", path, "--quick", "--json", "--timeout", "120", "--no-gpu-compile")
    assert code == 0, err
    assert json.loads(out)["result"]["outcome"] == "correct"
    code, out, err = run_cli("bench", str(FAULTS / "good.py"), "--quick", "--json", "--timeout", "120")
    assert code == 0, err
    assert json.loads(out)["result"]["stages"][-1] == {**json.loads(out)["result"]["stages"][-1],
                                                       "name": "gpu-compile", "status": "pass"}


@pytest.mark.timeout(120)
def test_bench_rejects_bad_arguments(home, run_cli):
    code, _, err = run_cli("bench", "no_such_type_or_file")
    assert code == 4 and "neither a kernel file nor a kernel type" in err
    code, _, err = run_cli("bench", str(FAULTS / "good.py"), "--shape", "1x2x3")
    assert code == 2 and "2 dims" in err and "--shape" in err  # a usage error, naming the option


@pytest.mark.timeout(180)
def test_calibrate_measures_and_stores_ceilings(home, run_cli):
    code, out, err = run_cli("bench", "--calibrate")
    assert code == 0, err
    assert "GB/s" in out
    with Store(home.db) as store:
        from autokernel.bench import device_key

        dev = store.get_device(device_key())
        assert dev is not None and dev.copy_gbps > 0.1 and dev.matmul_tflops_fp32 > 0
        assert dev.torch_version
