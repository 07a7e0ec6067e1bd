"""Export to the kernels-hub layout: loaded back by the real `kernels` library, pushed to a local Hub."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
import torch

from autokernel.errors import ExportError
from autokernel.export import export_kernel, provenance_from_file, provenance_from_store
from autokernel.export.layout import digest_files
from autokernel.export.push import push_folder
from autokernel.kernels import get_spec, starter_path
from autokernel.store import Store
from autokernel.workspace import Workspace
from support.fake_hub import FakeHub

kernels = pytest.importorskip("kernels")


def _exported_matmul(tmp_path: Path):
    source, prov = provenance_from_file(starter_path("matmul", "triton"))
    return export_kernel(source, prov, "autokernel-test/ak-matmul", tmp_path / "export")


def test_triton_export_loads_with_kernels_and_matches_reference(tmp_path):
    result = _exported_matmul(tmp_path)
    out = result.out_dir
    assert set(result.variants) == {"torch-cuda", "torch-universal"}
    config = tomllib.loads((out / "build.toml").read_text())
    assert config["general"]["name"] == "ak-matmul" and config["general"]["hub"]["repo-id"] == "autokernel-test/ak-matmul"
    # the kernel file as written, its lean launch path shipped beside it instead of imported from autokernel
    shipped = starter_path("matmul", "triton").read_text().replace("from autokernel.kernels.launcher import ",
                                                                   "from ._launcher import ")
    assert (out / "torch-ext" / "ak_matmul" / "_kernel.py").read_text() == shipped
    assert (out / "torch-ext" / "ak_matmul" / "_launcher.py").exists()

    k = kernels.get_local_kernel(out)
    spec = get_spec("matmul")
    gen = torch.Generator().manual_seed(1)
    a, b = spec.make_inputs({"M": 33, "N": 17, "K": 40}, torch.float32, "cpu", gen, "normal")
    got = k.matmul(a, b)
    torch.testing.assert_close(got, spec.reference(a, b), atol=1e-4, rtol=1e-4)
    assert k.kernel_fn is k.matmul


def test_metadata_digest_matches_what_kernels_computes(tmp_path):
    from kernels._rust import Digest, DigestAlgorithm, Metadata

    out = _exported_matmul(tmp_path).out_dir
    for variant in ("torch-cuda", "torch-universal"):
        vdir = out / "build" / variant
        meta = Metadata.read_from_file(vdir / "metadata.json")
        assert meta.name.python_name == "ak_matmul"
        meta.digest.validate(Digest.hash_variant(DigestAlgorithm.SHA256, vdir))
        # a tampered file must break the digest, or the check above proves nothing
        (vdir / "_kernel.py").write_text((vdir / "_kernel.py").read_text() + "\n# tampered\n")
        with pytest.raises(Exception):
            meta.digest.validate(Digest.hash_variant(DigestAlgorithm.SHA256, vdir))


def test_card_reports_the_experiment_it_came_from(tmp_path, home):
    source = starter_path("matmul", "triton").read_text()
    with Store(home.db) as store:
        ws = Workspace.open(home)
        base = ws.add_kernel("tiny.matmul", source, "starter")
        kernel = store.add_kernel("tiny.matmul", "matmul", model="tiny", shapes=[{"M": 64, "N": 64, "K": 64}],
                                  dtype="float16", branch=ws.branch_name("tiny.matmul"), base_commit=base)
        run = store.create_run("loop", model="tiny")
        store.add_experiment(run_id=run.id, kernel_id=kernel.id, status="kept", commit=base, latency_us=10.0,
                             eager_us=15.0, compile_us=12.0, speedup_vs_eager=1.5, speedup_vs_compile=1.2,
                             device="NVIDIA H200", correctness="PASS", stage_smoke="pass")
        src, prov = provenance_from_store(store, ws, "tiny.matmul")
    assert src == source and prov.commit == base and prov.experiment == 1
    out = export_kernel(src, prov, "me/tiny-matmul", tmp_path / "x").out_dir
    card = (out / "README.md").read_text()
    assert base in card and "NVIDIA H200" in card and "1.50x" in card and "1.20x" in card
    assert "torch.matmul" in card or "matmul" in card


def test_push_uploads_every_file_to_main_and_version_branch(tmp_path):
    out = _exported_matmul(tmp_path).out_dir
    local = {p.relative_to(out).as_posix(): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    with FakeHub() as hub:
        url = push_folder(out, "autokernel-test/ak-matmul", version=1, token="hf_secret", endpoint=hub.url)
        repo = hub.repos["autokernel-test/ak-matmul"]
    assert repo["type"] == "kernel"
    assert repo["branches"]["main"] == local and repo["branches"]["v1"] == local
    assert "commit" in url and not hub.unknown
    assert set(hub.auth_headers) == {"Bearer hf_secret"}


def test_push_without_network_fails_clearly_and_keeps_the_export(tmp_path):
    out = _exported_matmul(tmp_path).out_dir
    before = digest_files(out)
    with pytest.raises(ExportError) as info:
        push_folder(out, "autokernel-test/ak-matmul", token="hf_x", endpoint="http://127.0.0.1:9")
    assert "intact" in info.value.one_line() and "\n" not in info.value.one_line()
    assert digest_files(out) == before


def test_bad_repo_id_and_foreign_folder_are_refused(tmp_path):
    source, prov = provenance_from_file(starter_path("matmul", "triton"))
    with pytest.raises(ExportError):
        export_kernel(source, prov, "no-slash", tmp_path / "a")
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "precious.txt").write_text("keep me")
    with pytest.raises(ExportError):
        export_kernel(source, prov, "me/ak-matmul", foreign)
    assert (foreign / "precious.txt").read_text() == "keep me"


def test_cli_export_from_file(tmp_path, home, run_cli):
    out = tmp_path / "cli-export"
    code, stdout, stderr = run_cli("export", str(starter_path("matmul", "triton")), "--repo-id", "me/ak-mm",
                                   "--out", str(out))
    assert code == 0, stderr
    assert "torch-universal" in stdout
    meta = json.loads((out / "build" / "torch-universal" / "metadata.json").read_text())
    assert meta["name"] == "ak-mm"
