"""autokernel sample problem (KernelBench format), not the official KernelBench set."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """A LLaMA model built from a transformers config with random weights (no download):
    two decoder layers, returns the last hidden state."""

    def __init__(self, hidden_size, num_layers, num_heads, intermediate_size, vocab_size):
        super().__init__()
        from transformers import LlamaConfig, LlamaModel

        config = LlamaConfig(hidden_size=hidden_size, num_hidden_layers=num_layers, num_attention_heads=num_heads,
                             num_key_value_heads=num_heads, intermediate_size=intermediate_size,
                             vocab_size=vocab_size, max_position_embeddings=4096)
        config._attn_implementation = "eager"
        self.model = LlamaModel(config)

    def forward(self, input_ids):
        return self.model(input_ids=input_ids, use_cache=False).last_hidden_state


batch_size = 4
seq_len = 512
hidden_size = 1024
num_layers = 2
num_heads = 16
intermediate_size = 2816
vocab_size = 8192
TINY = {"batch_size": 1, "seq_len": 8, "hidden_size": 32, "num_heads": 2, "intermediate_size": 64,
        "vocab_size": 64, "num_layers": 1}


def get_inputs():
    return [torch.randint(0, vocab_size, (batch_size, seq_len))]


def get_init_inputs():
    return [hidden_size, num_layers, num_heads, intermediate_size, vocab_size]
