"""Model loading: tiny presets, defaults, factory files, offline from_pretrained and its errors."""

from __future__ import annotations

import pytest
import torch

from autokernel.errors import ModelError
from autokernel.models import PRESETS, load_model, output_tensor


@pytest.mark.parametrize("name,family_out", [("gpt2-tiny", "logits"), ("llama-tiny", "logits"),
                                             ("bert-tiny", "last_hidden_state")])
def test_tiny_presets_run_with_valid_inputs(name, family_out):
    b = load_model(name, batch=2, seq=12)
    assert not b.model.training
    assert b.dtype == torch.float32 and b.device.type == ("cuda" if torch.cuda.is_available() else "cpu")
    ids = b.inputs["input_ids"]
    assert ids.shape == (2, 12) and ids.dtype == torch.int64
    vocab = b.model.config.vocab_size
    assert int(ids.min()) >= 0 and int(ids.max()) < vocab
    if name == "bert-tiny":
        assert torch.equal(b.inputs["attention_mask"], torch.ones_like(ids))
    out = b.forward()
    t = output_tensor(out)
    assert torch.equal(t, getattr(out, family_out))
    width = vocab if family_out == "logits" else b.model.config.hidden_size
    assert t.shape == (2, 12, width) and torch.isfinite(t).all()


def test_presets_are_seeded_and_fresh_inputs_differ():
    a, b = load_model("llama-tiny", seed=3), load_model("llama-tiny", seed=3)
    assert torch.equal(a.model.lm_head.weight, b.model.lm_head.weight)
    assert torch.equal(a.inputs["input_ids"], b.inputs["input_ids"])
    c = load_model("llama-tiny", seed=4)
    assert not torch.equal(a.model.lm_head.weight, c.model.lm_head.weight)
    assert not torch.equal(a.make_inputs(1)["input_ids"], a.make_inputs(2)["input_ids"])
    assert a.model.config._attn_implementation == "sdpa"


def test_dtype_option_and_llama_7b_config_without_building_it():
    b = load_model("llama-tiny", dtype="bf16", device="cpu")
    assert b.dtype == torch.bfloat16 and next(b.model.parameters()).dtype == torch.bfloat16
    assert b.options() == {"batch": 1, "seq": 32, "dtype": "bfloat16", "device": "cpu"}
    cfg = PRESETS["llama-7b"].config
    assert (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["intermediate_size"],
            cfg["vocab_size"]) == (4096, 32, 32, 11008, 32000)
    # on the meta device the 7B model is built without memory: the parameter count is the real one
    meta = load_model("llama-7b", device="meta", dtype="bf16", seq=8)
    n = sum(p.numel() for p in meta.model.parameters())
    assert 6.7e9 < n < 6.8e9


def test_seq_longer_than_positions_is_refused():
    with pytest.raises(ModelError, match="positions"):
        load_model("gpt2-tiny", seq=10_000)


FACTORY = '''
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)
    def forward(self, x, scale=1.0):
        return torch.softmax(self.fc(x) * scale, dim=-1)

def make_dict():
    return Net(), {"x": torch.randn(3, 8), "scale": 2.0}

def make_tuple(batch=1, dtype=None):
    return Net(), (torch.randn(batch, 8),)

def bad():
    return 42
'''


def test_factory_file_dict_and_tuple_inputs(tmp_path):
    f = tmp_path / "mymodel.py"
    f.write_text(FACTORY)
    b = load_model(f"{f}:make_dict", dtype="float32", device="cpu")
    assert b.source == "factory" and b.inputs["scale"] == 2.0
    out = b.forward()
    ref = torch.softmax(b.model.fc(b.inputs["x"]) * 2.0, dim=-1)
    assert torch.allclose(out, ref)
    t = load_model(f"{f}:make_tuple", batch=5, device="cpu")
    assert isinstance(t.inputs, tuple) and t.inputs[0].shape == (5, 8)
    assert t.forward().shape == (5, 4)
    with pytest.raises(ModelError, match="must return"):
        load_model(f"{f}:bad", device="cpu")
    with pytest.raises(ModelError, match="no callable"):
        load_model(f"{f}:missing", device="cpu")


def test_local_directory_loads_with_from_pretrained(tmp_path):
    src = load_model("llama-tiny")
    src.model.save_pretrained(tmp_path / "tiny")
    b = load_model(str(tmp_path / "tiny"), seq=10, device="cpu")
    assert b.source == "pretrained" and b.inputs["input_ids"].shape == (1, 10)
    assert torch.equal(b.model.lm_head.weight, src.model.lm_head.weight)
    assert output_tensor(b.forward()).shape == (1, 10, 1000)


def test_unavailable_model_names_what_was_looked_for():
    with pytest.raises(ModelError) as info:
        load_model("no-such-org/no-such-model-xyz", device="cpu")
    text = info.value.one_line()
    assert "no-such-org/no-such-model-xyz" in text and "Hugging Face cache" in text
    assert "llama-7b" in text and "gpt2-tiny" in text  # the presets are listed
    with pytest.raises(ModelError, match="unknown model 'lama'"):
        load_model("lama", device="cpu")


def test_every_model_the_readme_names_is_a_preset():
    """The README's list of models (`bert-base-tiny` once stood there for the `bert-tiny` preset)."""
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    listed = readme.split("Models: ", 1)[1].split("The profile is stored", 1)[0]
    names = [n for n in re.findall(r"`([^`]+)`", listed) if not re.search(r"[/:.]", n)]
    assert len(names) >= 7 and set(names) == set(PRESETS), names
