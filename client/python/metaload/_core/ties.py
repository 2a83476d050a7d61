"""Ties for materialize: a tie the module's config makes but the checkpoint stores apart is
loaded untied and tied back where the values turn out equal (as transformers' tie_weights
does), and the report lists every tie the checkpoint names and whether the module holds it.
"""
from __future__ import annotations

from typing import Dict, List, Mapping, Tuple

import torch

from .. import _native
from .report import LoadReport, Provenance
from .verify import _is_meta


def _untie_both_stored(model: torch.nn.Module, stored: Mapping[str, _native.StoredTensor]
                       ) -> Tuple[List[Tuple[str, str]], List[Tuple[str, str]]]:
    """A tie the module's config makes whose tensors the checkpoint stores apart: transformers
    (tie_weights during from_pretrained) loads both and does not tie them when their values
    differ. Each such alias gets a meta tensor of its own here, to be read from its own bytes
    (_tie_again_where_equal ties those that hold the same values back, as transformers does).
    Returns the (alias, tensor) pairs untied, and (alias, why) for those it cannot untie: a
    DTensor whose parallelization already holds the tie."""
    first: Dict[int, str] = {}
    untied: List[Tuple[str, str]] = []
    apart: List[Tuple[str, str]] = []
    for prefix, module in list(model.named_modules(remove_duplicate=False)):
        for attr, t in list(module._parameters.items()):
            if t is None or not _is_meta(t):
                continue
            full = f"{prefix}.{attr}" if prefix else attr
            if id(t) not in first:
                first[id(t)] = full
                continue
            source = first[id(t)]
            if full == source or full not in stored or source not in stored:
                continue
            if hasattr(t, "device_mesh"):
                apart.append((full, f"tied to {source} in the module, but the checkpoint stores both, with values "
                                    "of their own (transformers then loads them untied): build the model with "
                                    "tie_word_embeddings=False before parallelizing it"))
                continue
            module._parameters[attr] = torch.nn.Parameter(torch.empty_like(t, device="meta"),
                                                          requires_grad=t.requires_grad)
            untied.append((full, source))
            # As transformers' tie_weights records it: the model's ties no longer include it.
            ties = getattr(model, "all_tied_weights_keys", None)
            if isinstance(ties, dict):
                ties.pop(full, None)
    return untied, apart


def _tie_again_where_equal(model: torch.nn.Module, untied: List[Tuple[str, str]],
                           report: LoadReport) -> List[Tuple[str, str]]:
    """Of the pairs _untie_both_stored untied, ties back those whose bytes turned out equal (as
    transformers' tie_weights does); returns the pairs left apart."""
    apart: List[Tuple[str, str]] = []
    for alias, source in untied:
        held, kept_apart = model.get_parameter(alias), model.get_parameter(source)
        if torch.equal(held, kept_apart):
            parent, _, attr = alias.rpartition(".")
            model.get_submodule(parent)._parameters[attr] = kept_apart
            report._note(alias, Provenance("tied", tied_to=source), f"tied:{source}")
            ties = getattr(model, "all_tied_weights_keys", None)
            if isinstance(ties, dict):
                ties[alias] = source
        else:
            apart.append((alias, source))
    return apart


def _ties(model: torch.nn.Module, view: _native.ModelView) -> List[Tuple[str, str, bool]]:
    found: Dict[str, torch.Tensor] = {}
    for prefix, module in model.named_modules(remove_duplicate=False):
        for attr, t in module._parameters.items():
            if t is not None:
                found[f"{prefix}.{attr}" if prefix else attr] = t
    return [(alias, stored, found[alias] is found[stored]) for alias, stored in view.tied_to.items()
            if alias in found and stored in found]
