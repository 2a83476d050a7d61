"""A plain torch module (no transformers) whose head is its embedding, the way users tie them,
and a checkpoint of it written by safetensors' own save_model: it stores embed.weight once and
records the dropped name in the header's metadata ({"head.weight": "embed.weight"}), with no
config.json beside it. Shared by strict_cases.py and test_strict.py's torchrun ranks.
"""
import os

import torch
from safetensors.torch import load_model, save_model

VOCAB, DIM = 16, 8


class TiedNet(torch.nn.Module):
    def __init__(self, tied=True, head_dtype=None, head_vocab=VOCAB):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, DIM)
        self.body = torch.nn.Linear(DIM, DIM)
        self.head = torch.nn.Linear(DIM, head_vocab, bias=False, dtype=head_dtype)
        if tied:
            self.head.weight = self.embed.weight

    def forward(self, tokens):
        return self.head(self.body(self.embed(tokens)))


def save_tied(folder):
    """Writes folder/model.safetensors with save_model; returns the module it saved."""
    os.makedirs(folder, exist_ok=True)
    torch.manual_seed(0)
    net = TiedNet()
    save_model(net, os.path.join(folder, "model.safetensors"))
    return net


def loaded_by_safetensors(folder):
    """The same module read by safetensors' load_model: the oracle."""
    net = TiedNet()
    load_model(net, os.path.join(folder, "model.safetensors"))
    return net
