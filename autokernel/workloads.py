"""The workloads a model is verified at: what users run, not one convenient shape.

For a causal LM: prefill of 1x2048, 1x512 and 1x128 tokens (the prompt's pass as generate() makes it,
filling a new KV cache), and decode (one new token per sequence on
a KV cache of 2048 positions) at batch 1 and batch 32, capped by the model's positions. Encoders: a
forward pass at 1x512, 1x128 and 32x128. A model from a factory file: its own example inputs. On a
CPU (tests, the interpreter), one small prefill and one small decode stand in for them.

Decode uses transformers' StaticCache, the cache torch.compile and CUDA graphs are meant to run with:
its buffers are allocated once and written in place, so every timed step has the same shapes and
addresses (attention reads the whole static length whatever the position). The cache is filled once by
a prefill of random tokens; a timed batch of steps then decodes positions 2048, 2049, ... and `reset`
sets the write position back to the prompt's end between batches (DECODE_STEPS at most per batch).
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass
from typing import Any

import torch

from autokernel.errors import ConfigError
from autokernel.models import ModelBundle, output_tensor

GPU_PREFILL = (2048, 512, 128)
GPU_DECODE = (1, 32)
DECODE_CACHE = 2048
DECODE_STEPS = 64  # decode steps the cache has room for between resets


@dataclass(frozen=True)
class Workload:
    kind: str  # prefill | decode | forward
    batch: int
    tokens: int  # prefill / forward length; for decode, the KV cache length

    @property
    def label(self) -> str:
        if self.kind == "decode":
            return f"decode b{self.batch} @{self.tokens}"
        return f"{self.kind} {self.batch}x{self.tokens}"

    @property
    def spec(self) -> str:
        """The form parse_workload reads back."""
        return f"decode:{self.batch}@{self.tokens}" if self.kind == "decode" else f"{self.kind}:{self.batch}x{self.tokens}"


_FORMS = (re.compile(r"^(prefill|forward):(\d+)x(\d+)$"), re.compile(r"^(decode):(\d+)@(\d+)$"))


def parse_workload(text: str) -> Workload:
    """'prefill:1x2048', 'forward:32x128' or 'decode:32@2048' (batch 32 on a 2048-position cache)."""
    t = text.strip().lower()
    for form in _FORMS:
        m = form.match(t)
        if m:
            kind, batch, tokens = m.group(1), int(m.group(2)), int(m.group(3))
            if batch < 1 or tokens < 1:
                break
            return Workload(kind, batch, tokens)
    raise ConfigError(f"bad workload {text!r}: use prefill:BxS, forward:BxS or decode:B@CACHE "
                      f"(e.g. prefill:1x2048, decode:32@2048)")


def is_causal_lm(model: torch.nn.Module) -> bool:
    name = type(model).__name__
    cfg = getattr(model, "config", None)
    return (name.endswith("ForCausalLM") or name.endswith("LMHeadModel")) and not getattr(
        cfg, "is_encoder_decoder", False)


def _max_positions(model: torch.nn.Module) -> int | None:
    cfg = getattr(model, "config", None)
    return getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", None)


def default_workloads(bundle: ModelBundle) -> list[Workload]:
    on_gpu = bundle.device.type == "cuda"
    if bundle.source == "factory":
        return [Workload("forward", bundle.batch, bundle.seq or 0)]
    limit = _max_positions(bundle.model) or 1 << 30
    if is_causal_lm(bundle.model):
        if not on_gpu:
            seq = min(bundle.seq or 32, limit - DECODE_STEPS)
            return [Workload("prefill", bundle.batch, seq), Workload("decode", 1, seq)]
        cache = min(DECODE_CACHE, limit - DECODE_STEPS)
        return [Workload("prefill", 1, min(s, limit)) for s in GPU_PREFILL] + \
            [Workload("decode", b, cache) for b in GPU_DECODE]
    if not on_gpu:
        return [Workload("forward", bundle.batch, min(bundle.seq or 32, limit))]
    return [Workload("forward", 1, min(512, limit)), Workload("forward", 1, min(128, limit)),
            Workload("forward", 32, min(128, limit))]


class WorkloadRun:
    """One workload's inputs on the bundle's model, and the step that is timed."""

    def __init__(self, bundle: ModelBundle, workload: Workload, seed: int = 0):
        self.bundle, self.workload = bundle, workload
        model = bundle.model
        if workload.kind == "decode" and not is_causal_lm(model):
            raise ConfigError(f"{bundle.name} is not a causal LM: it has no decode workload")
        limit = _max_positions(model)
        need = workload.tokens + (DECODE_STEPS if workload.kind == "decode" else 0)
        if limit and need > limit:
            raise ConfigError(f"{workload.label} needs {need} positions; {bundle.name} has {limit}")
        gen = torch.Generator().manual_seed(seed)
        vocab = int(getattr(model.config, "vocab_size", 1000)) if hasattr(model, "config") else 1000
        dev = bundle.device
        self.cache = None
        if bundle.source == "factory":
            self.inputs: Any = bundle.make_inputs(seed)
        elif workload.kind == "decode":
            # no position_ids: the model takes them from the cache's position, which each step advances
            self.inputs = {"input_ids": torch.randint(0, vocab, (workload.batch, 1), generator=gen).to(dev),
                           "use_cache": True}
            self._prompt = torch.randint(0, vocab, (workload.batch, workload.tokens), generator=gen).to(dev)
        else:
            ids = torch.randint(0, vocab, (workload.batch, workload.tokens), generator=gen).to(dev)
            self.inputs = {"input_ids": ids}
            if getattr(model.config, "model_type", "") in ("bert", "roberta", "distilbert"):
                self.inputs.update(attention_mask=torch.ones_like(ids), token_type_ids=torch.zeros_like(ids))
            # a causal LM's prefill is the call generate() makes for the prompt: the model's default,
            # which fills a new KV cache (transformers' DynamicCache)

    def prepare(self) -> None:
        """Decode: allocate the static cache and fill it with a prefill of the prompt (plain model)."""
        if self.workload.kind != "decode" or self.cache is not None:
            return
        from transformers import StaticCache

        model = self.bundle.model
        self.cache = StaticCache(config=model.config, max_cache_len=self.workload.tokens + DECODE_STEPS)
        # transformers 5.x renames past_key_values to cache (the old name warns until 5.40)
        key = "cache" if "cache" in inspect.signature(type(model).forward).parameters else "past_key_values"
        with torch.inference_mode():
            model(input_ids=self._prompt, use_cache=True, logits_to_keep=1, **{key: self.cache})
        del self._prompt
        self.inputs[key] = self.cache

    def reset(self) -> None:
        """Put the cache's write position back at the prompt's end (decode only; outside timing)."""
        if self.cache is None:
            return
        for layer in getattr(self.cache, "layers", ()):
            pos = getattr(layer, "cumulative_length", None)
            if isinstance(pos, torch.Tensor):
                pos.fill_(self.workload.tokens)
            elif pos is not None:
                layer.cumulative_length = self.workload.tokens

    @property
    def steps_per_reset(self) -> int | None:
        """How many steps may run between resets (None: any number)."""
        return DECODE_STEPS if self.workload.kind == "decode" else None

    def step(self, model: torch.nn.Module | None = None) -> torch.Tensor:
        m = self.bundle.model if model is None else model
        out = m(**self.inputs) if isinstance(self.inputs, dict) else m(*self.inputs)
        return output_tensor(out)

    def release(self) -> None:
        self.cache = None
        self.inputs = None
