"""Models to profile and verify: named presets with random weights, offline from_pretrained, custom factories.

Every loader returns a ModelBundle: the model in eval mode on its device and dtype, and example
inputs valid for it (token ids inside the vocabulary, attention masks where the model needs them).
`bundle.make_inputs(seed)` draws fresh inputs of the same kind, which verify uses so that a kernel
cannot pass by having seen the profiling inputs.
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from autokernel.errors import ModelError
from autokernel.kernels.spec import dtype_name, to_dtype


@dataclass(frozen=True)
class Preset:
    family: str  # gpt2 | llama | bert: picks the config class, the model class and the inputs
    config: dict[str, Any]
    seq: int  # default sequence length
    description: str


PRESETS: dict[str, Preset] = {
    "gpt2": Preset("gpt2", {}, 512, "GPT-2 124M (GPT2Config defaults)"),
    "llama": Preset("llama", dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
                                  num_attention_heads=16, num_key_value_heads=16, vocab_size=32000,
                                  max_position_embeddings=4096), 512, "small LLaMA: hidden 1024, 8 layers"),
    "llama-7b": Preset("llama", dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                                     num_attention_heads=32, num_key_value_heads=32, vocab_size=32000,
                                     max_position_embeddings=4096, rms_norm_eps=1e-5), 2048,
                       "LLaMA-7B: hidden 4096, 32 layers, 32 heads, ffn 11008"),
    "bert-base": Preset("bert", {}, 512, "BERT-base (BertConfig defaults)"),
    # tiny presets: CPU tests and CPU smoke runs (interpreter-friendly sizes)
    "gpt2-tiny": Preset("gpt2", dict(n_layer=2, n_embd=64, n_head=4, vocab_size=1000, n_positions=256,
                                     bos_token_id=0, eos_token_id=0), 32,
                        "GPT-2, 2 layers, hidden 64"),
    "llama-tiny": Preset("llama", dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=2, vocab_size=1000,
                                       max_position_embeddings=256), 32, "LLaMA, 2 layers, hidden 64, GQA 4/2"),
    "bert-tiny": Preset("bert", dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=128, vocab_size=1000, max_position_embeddings=256), 32,
                        "BERT, 2 layers, hidden 64"),
}


@dataclass
class ModelBundle:
    name: str
    model: torch.nn.Module
    inputs: dict[str, Any] | tuple
    dtype: torch.dtype
    device: torch.device
    batch: int
    seq: int | None
    source: str  # preset | pretrained | factory
    config: dict[str, Any] = field(default_factory=dict)  # a summary of the model's config
    input_fn: Callable[[int], dict[str, Any] | tuple] | None = None

    @property
    def dtype_name(self) -> str:
        return dtype_name(self.dtype)

    def options(self) -> dict[str, Any]:
        """What it takes to load this bundle again (stored in the profile's config)."""
        return {"batch": self.batch, "seq": self.seq, "dtype": self.dtype_name, "device": str(self.device)}

    def make_inputs(self, seed: int) -> dict[str, Any] | tuple:
        """Fresh inputs of the same kind; factories without an input generator reuse their example."""
        return self.input_fn(seed) if self.input_fn is not None else self.inputs

    def forward(self, inputs: dict[str, Any] | tuple | None = None, model: torch.nn.Module | None = None):
        inputs = self.inputs if inputs is None else inputs
        m = self.model if model is None else model
        return m(**inputs) if isinstance(inputs, dict) else m(*inputs)


def output_tensor(out: Any) -> torch.Tensor:
    """The tensor a model's output is judged by: logits, else the last hidden state, else the first tensor."""
    if isinstance(out, torch.Tensor):
        return out
    for key in ("logits", "last_hidden_state"):
        value = getattr(out, key, None)
        if value is None and isinstance(out, dict):
            value = out.get(key)
        if isinstance(value, torch.Tensor):
            return value
    items = out.values() if isinstance(out, dict) else out if isinstance(out, (tuple, list)) else ()
    for value in items:
        if isinstance(value, torch.Tensor):
            return value
    raise ModelError(f"cannot find an output tensor in a {type(out).__name__}")


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _resolve(dtype: str | torch.dtype | None, device: str | torch.device | None) -> tuple[torch.dtype, torch.device]:
    dev = torch.device(device) if device is not None else default_device()
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ModelError("device cuda was asked for but no CUDA GPU is available")
    try:
        dt = to_dtype(dtype) if dtype is not None else (torch.bfloat16 if dev.type == "cuda" else torch.float32)
    except (ValueError, KeyError) as exc:
        raise ModelError(str(exc)) from exc
    return dt, dev


def _token_inputs(family: str, vocab: int, batch: int, seq: int, device: torch.device) -> Callable[[int], dict]:
    def make(seed: int) -> dict[str, Any]:
        gen = torch.Generator().manual_seed(seed)
        ids = torch.randint(0, vocab, (batch, seq), generator=gen).to(device)
        inputs: dict[str, Any] = {"input_ids": ids}
        if family == "bert":
            # BERT reads a padding mask and segment ids; causal LMs build their own causal mask
            inputs["attention_mask"] = torch.ones_like(ids)
            inputs["token_type_ids"] = torch.zeros_like(ids)
        else:
            # one prefill pass: no KV cache to allocate and copy into (that is generation's cost)
            inputs["use_cache"] = False
        return inputs
    return make


def _config_summary(cfg: Any) -> dict[str, Any]:
    keys = ("model_type", "hidden_size", "n_embd", "intermediate_size", "num_hidden_layers", "n_layer",
            "num_attention_heads", "n_head", "num_key_value_heads", "vocab_size", "max_position_embeddings",
            "head_dim", "_attn_implementation")
    summary = {}
    for k in keys:
        v = getattr(cfg, k, None)
        if isinstance(v, (int, float, str)) and v is not None:
            summary[k.lstrip("_")] = v
    return summary


def _build_preset(name: str, preset: Preset, batch: int, seq: int | None, dt: torch.dtype,
                  dev: torch.device, seed: int) -> ModelBundle:
    import transformers as tf

    if preset.family == "gpt2":
        cfg, cls = tf.GPT2Config(**preset.config), tf.GPT2LMHeadModel
    elif preset.family == "llama":
        cfg, cls = tf.LlamaConfig(**preset.config), tf.LlamaForCausalLM
    else:
        cfg, cls = tf.BertConfig(**preset.config), tf.BertModel
    seq = seq or preset.seq
    limit = getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", None)
    if limit and seq > limit:
        raise ModelError(f"{name}: seq {seq} is longer than the model's {limit} positions")
    torch.manual_seed(seed)
    # Built directly on the target device in the target dtype: LLaMA-7B in fp32 on the CPU first
    # would take minutes and 28 GB.
    with torch.device(dev):
        model = cls._from_config(cfg, dtype=dt, attn_implementation="sdpa")
    model.eval()
    make = _token_inputs(preset.family, cfg.vocab_size, batch, seq, dev)
    return ModelBundle(name=name, model=model, inputs=make(seed), dtype=dt, device=dev, batch=batch, seq=seq,
                       source="preset", config=_config_summary(model.config), input_fn=make)


def _load_pretrained(name: str, batch: int, seq: int | None, dt: torch.dtype, dev: torch.device,
                     seed: int) -> ModelBundle:
    import transformers as tf

    try:
        cfg = tf.AutoConfig.from_pretrained(name, local_files_only=True)
    except Exception as exc:  # transformers raises OSError/ValueError/EnvironmentError variants
        from huggingface_hub.constants import HF_HUB_CACHE

        raise ModelError(
            f"unknown model {name!r}: not a preset and not available locally: looked for a directory "
            f"{Path(name).resolve()} and for {name!r} in the Hugging Face cache {HF_HUB_CACHE} (offline)",
            hint=f"presets: {', '.join(PRESETS)}; or download it first, or use path/to/file.py:factory") from exc
    archs = getattr(cfg, "architectures", None) or []
    auto = tf.AutoModelForCausalLM if any(a.endswith("ForCausalLM") or a.endswith("LMHeadModel") for a in archs) \
        else tf.AutoModel
    try:
        with torch.device(dev):
            model = auto.from_pretrained(name, local_files_only=True, dtype=dt)
    except Exception as exc:
        raise ModelError(f"cannot load {name!r} from local files: {exc}") from exc
    model.eval()
    seq = seq or min(512, getattr(cfg, "max_position_embeddings", 512) or 512)
    family = "bert" if getattr(cfg, "model_type", "") in ("bert", "roberta", "distilbert") else "lm"
    make = _token_inputs(family, cfg.vocab_size, batch, seq, dev)
    return ModelBundle(name=name, model=model, inputs=make(seed), dtype=dt, device=dev, batch=batch, seq=seq,
                       source="pretrained", config=_config_summary(model.config), input_fn=make)


def _move_inputs(inputs: Any, dt: torch.dtype, dev: torch.device) -> Any:
    def move(v):
        if isinstance(v, torch.Tensor):
            return v.to(device=dev, dtype=dt) if v.is_floating_point() else v.to(dev)
        return v
    if isinstance(inputs, dict):
        return {k: move(v) for k, v in inputs.items()}
    if isinstance(inputs, (tuple, list)):
        return tuple(move(v) for v in inputs)
    if isinstance(inputs, torch.Tensor):
        return (move(inputs),)
    raise ModelError(f"a factory's example inputs must be a dict, a tuple or a tensor, got {type(inputs).__name__}")


def _load_factory(spec: str, batch: int, seq: int | None, dt: torch.dtype, dev: torch.device,
                  seed: int) -> ModelBundle:
    path_text, _, func_name = spec.rpartition(":")
    path = Path(path_text).expanduser()
    if not path.is_file():
        raise ModelError(f"factory file {path} does not exist")
    mod_name = f"autokernel_factory_{abs(hash(str(path.resolve())))}"
    loader = importlib.util.spec_from_file_location(mod_name, path)
    module = importlib.util.module_from_spec(loader)
    sys.modules[mod_name] = module
    try:
        loader.loader.exec_module(module)
    except Exception as exc:
        raise ModelError(f"cannot import {path}: {type(exc).__name__}: {exc}") from exc
    factory = getattr(module, func_name, None)
    if not callable(factory):
        raise ModelError(f"{path} has no callable {func_name!r}")
    # Pass only the options the factory declares, so a bare `def factory():` works too.
    offered = {"batch": batch, "seq": seq, "dtype": dt, "device": dev, "seed": seed}
    params = inspect.signature(factory).parameters
    takes_all = any(p.kind == p.VAR_KEYWORD for p in params.values())
    kwargs = {k: v for k, v in offered.items() if takes_all or k in params}
    torch.manual_seed(seed)
    try:
        result = factory(**kwargs)
        model, inputs = result
    except (TypeError, ValueError) as exc:
        raise ModelError(f"{spec}: a factory must return (model, example_inputs): {exc}") from exc
    if not isinstance(model, torch.nn.Module):
        raise ModelError(f"{spec} returned a {type(model).__name__}, not a torch.nn.Module")
    model = model.to(device=dev, dtype=dt).eval()
    return ModelBundle(name=spec, model=model, inputs=_move_inputs(inputs, dt, dev), dtype=dt, device=dev,
                       batch=batch, seq=seq, source="factory",
                       config=_config_summary(getattr(model, "config", None)) if hasattr(model, "config") else {})


def is_factory_spec(name: str) -> bool:
    head, sep, tail = name.rpartition(":")
    return bool(sep) and head.endswith(".py") and tail.isidentifier()


def load_model(name: str, *, batch: int = 1, seq: int | None = None, dtype: str | torch.dtype | None = None,
               device: str | torch.device | None = None, seed: int = 0) -> ModelBundle:
    """Load a preset, a local transformers model (id or directory), or `file.py:factory`.

    Defaults: bf16 on a GPU, fp32 on the CPU; cuda when available. Raises ModelError.
    """
    if batch < 1 or (seq is not None and seq < 1):
        raise ModelError("batch and seq must be positive")
    dt, dev = _resolve(dtype, device)
    if name in PRESETS:
        return _build_preset(name, PRESETS[name], batch, seq, dt, dev, seed)
    if is_factory_spec(name):
        return _load_factory(name, batch, seq, dt, dev, seed)
    # Anything else is a transformers id or directory; its error names the presets too.
    return _load_pretrained(name, batch, seq, dt, dev, seed)
