"""Strict accounting for materialize(): what a load may proceed with, decided before anything
is allocated or read.

A load succeeds only when every module tensor has a named source (checkpoint bytes, a computed
buffer rule, a tie, an init policy the user asked for by pattern) and every checkpoint tensor
is used or listed as unexpected. `account` takes the entries (entries._Entry), the native
library's check-only resolution, and the user's options, and says which tensors are refused
(and the summary lines people read), which missing tensors an init policy fills, which
checkpoint tensors are unexpected, and which module tensors are kept (not on meta, not read).

Thread-safety: pure functions over their arguments.
"""
from __future__ import annotations

import fnmatch
import json
import re
from dataclasses import dataclass, field
from typing import Collection, Dict, List, Mapping, Optional, Sequence, Set, Tuple, Union

import torch

from .. import _native
from .._errors import BadInputError, Error
from .entries import _Entry
from .verify import broken_ties

#: The start of the native library's reason for a tensor the checkpoint lacks (missing_init.cc).
MISSING = "it is not in the checkpoint"

#: init_missing as materialize takes it: one policy ("error", "zeros", "normal:STD") for every
#: missing tensor, or {name or fnmatch pattern: policy} for those it names.
InitMissing = Union[str, Mapping[str, str]]

_STRICT_FIX = "pass strict=False to load what matches and list the rest in report.unexpected"


@dataclass
class Accounting:
    refused: List[Tuple[str, str]] = field(default_factory=list)  # (tensor, why): nothing may be read
    summary: List[str] = field(default_factory=list)  # the refusals (or warnings), for people
    init: Dict[int, str] = field(default_factory=dict)  # entry index -> the policy that fills it
    unexpected: List[str] = field(default_factory=list)  # checkpoint tensors the module has no place for
    kept: List[int] = field(default_factory=list)  # indices (in `kept` entries) of tensors left as they are


def _policy_for(entry: _Entry, init_missing: InitMissing) -> Optional[str]:
    """The policy the user gave for this missing entry: None when none applies."""
    if isinstance(init_missing, str):
        return None if init_missing == "error" else init_missing
    for pattern, policy in init_missing.items():
        if any(name == pattern or fnmatch.fnmatchcase(name, pattern) for name in entry.names):
            return policy
    return None


def check_policies(view: _native.ModelView, init_missing: InitMissing) -> None:
    """Every policy parses (BadInputError naming it otherwise), before anything is resolved."""
    policies = [init_missing] if isinstance(init_missing, str) else list(init_missing.values())
    if not isinstance(init_missing, str) and not all(isinstance(p, str) for p in init_missing):
        raise BadInputError("init_missing: the keys are tensor names or fnmatch patterns (str)")
    for policy in policies:
        if not isinstance(policy, str):
            raise BadInputError(f"init_missing: {policy!r} is not a policy (\"zeros\", \"normal:STD\")")
        _native.materialize(view, [], source="auto", init_missing=policy, read_threads=1, timeout_s=1.0,
                            check_only=True)


_LAYER = re.compile(r"^(.*?)\.(\d+)\.")


def _layers(names: Sequence[str]) -> Dict[str, Set[int]]:
    out: Dict[str, Set[int]] = {}
    for name in names:
        m = _LAYER.match(name)
        if m:
            out.setdefault(m.group(1), set()).add(int(m.group(2)))
    return out


def _model_types(model: torch.nn.Module, checkpoint: Optional[str]) -> Tuple[Optional[str], Optional[str]]:
    """(the module's model_type, the checkpoint's config.json's), each None when unknown."""
    mine = getattr(getattr(model, "config", None), "model_type", None)
    theirs = None
    if checkpoint:
        try:  # through the storage seam, as every read of the checkpoint
            theirs = json.loads(_native.read_config_json(checkpoint)).get("model_type")
        except (Error, ValueError, AttributeError):
            theirs = None
    return (mine if isinstance(mine, str) else None), (theirs if isinstance(theirs, str) else None)


def likely_cause(unexpected: Sequence[str], used: Sequence[str], model: torch.nn.Module,
                 checkpoint: Optional[str]) -> str:
    """Why a checkpoint holds tensors the module has no place for, as people would guess it."""
    theirs, mine = _layers(list(unexpected) + list(used)), _layers(used)
    for prefix, indices in sorted(theirs.items()):
        have = mine.get(prefix, set())
        if have and max(indices) > max(have):
            return (f"the checkpoint has {max(indices) + 1} of {prefix}, the module {max(have) + 1}: "
                    "another size of this model?")
    module_type, checkpoint_type = _model_types(model, checkpoint)
    if module_type and checkpoint_type and module_type != checkpoint_type:
        return (f"the checkpoint is a {checkpoint_type} model (its config.json), the module a {module_type}: "
                "another architecture?")
    return "the module has no place for them: another architecture, or another variant of this model?"


def _head_of_a_base_model(model: torch.nn.Module, name: str) -> bool:
    """A transformers base model (AutoModel) read from a checkpoint with a head: the head's
    tensors are outside the base model's prefix, and unused, as from_pretrained leaves them."""
    prefix = getattr(model, "base_model_prefix", "")
    return bool(prefix) and getattr(model, "base_model", None) is model and not name.startswith(prefix + ".")


def _stored_names(e: _Entry, view: _native.ModelView, stored: Mapping[str, _native.StoredTensor],
                  quantized: Optional[Mapping[str, Tuple[str, str, List[int], str]]] = None) -> Set[str]:
    """The checkpoint tensors an entry reads (or would read, were it on meta): a quantized
    value's codes and scales (``view.quantized``) are both its."""
    out = {n for n in e.names + [e.name] if n in stored}
    out |= {view.tied_to[n] for n in e.names if n in view.tied_to and view.tied_to[n] in stored}
    if e.pieces:
        out |= {piece.stored for piece in e.pieces}
    for n in list(out) + [e.name]:
        if quantized and n in quantized:
            out |= {quantized[n][0], quantized[n][1]}
    return out


def _untied_alias(e: _Entry, model: torch.nn.Module, view: _native.ModelView,
                  stored: Mapping[str, _native.StoredTensor]) -> Optional[str]:
    """Why an entry must not be read as its checkpoint's tie says: the checkpoint stores only
    the tensor it ties `e` to, and the module (by transformers' own tie rules) does not tie them."""
    if e.name in stored or e.name not in view.tied_to or not hasattr(model, "all_tied_weights_keys"):
        return None
    target = view.tied_to[e.name]
    if target in e.names or e.name in getattr(model, "all_tied_weights_keys"):
        return None
    return (f"{MISSING}: the checkpoint stores only {target}, which its config ties it to, and this module does "
            f"not tie them (tie_word_embeddings=False?): another architecture or configuration?")


def account(model: torch.nn.Module, entries: Sequence[_Entry], kept: Sequence[_Entry], view: _native.ModelView,
            stored: Mapping[str, _native.StoredTensor], refused: Sequence[Tuple[int, str]], *,
            init_missing: InitMissing, strict: bool, checkpoint: Optional[str],
            tied_after: Collection[str] = ()) -> Accounting:
    """The accounting of one load. `refused`: (entry index, why) of the native check-only
    resolution with no init policy."""
    out = Accounting()
    missing: List[int] = []
    for index, why in refused:
        if why.startswith(MISSING):
            if index not in missing:
                missing.append(index)
        else:
            out.refused.append((entries[index].names[0], why))
    for index, e in enumerate(entries):
        if _untied_alias(e, model, view, stored) is not None and index not in missing:
            missing.append(index)
    # The checkpoint's ties whose alias it does not store: the module must hold them as one tensor.
    aliases = {alias: name for alias, name in view.tied_to.items() if alias not in stored}
    for target, _, why in broken_ties(model, aliases, tied_after):
        out.refused.append((target, why))
        out.summary.append(f"{target}: {why}")
    total = len(entries) + len(kept)
    wanted = {i: _policy_for(entries[i], init_missing) for i in missing}
    initialized = [i for i, p in wanted.items() if p is not None]
    # The init budget is the C++ core's (planner/doctor/init_budget.h), as `metactl register`'s:
    # never most of the model, and one policy for whatever is missing only for a few tensors.
    catch_all = init_missing if isinstance(init_missing, str) else None
    refusal = _native.init_budget_refusal(len(initialized), total, catch_all=catch_all is not None,
                                          policy=catch_all or "",
                                          example=entries[initialized[0]].names[0] if initialized else "")
    if refusal is not None:
        out.summary.append(refusal)
        initialized = []
    out.init = {i: p for i, p in wanted.items() if i in initialized and p is not None}
    for i in missing:
        if i not in out.init:
            e = entries[i]
            out.refused.append((e.names[0], _untied_alias(e, model, view, stored) or MISSING))

    used: Set[str] = set()
    quantized = view.quantized
    for e in list(entries) + list(kept):
        used |= _stored_names(e, view, stored, quantized)
    out.unexpected = sorted(n for n in stored if n not in used and not _head_of_a_base_model(model, n))
    if out.unexpected:
        cause = likely_cause(out.unexpected, sorted(used), model, checkpoint)
        shown = ", ".join(out.unexpected[:4]) + (", …" if len(out.unexpected) > 4 else "")
        line = (f"{len(out.unexpected)} checkpoint tensor{'s' if len(out.unexpected) != 1 else ''} the module has "
                f"no place for ({shown}): {cause}")
        if strict:
            out.summary += [line, f"  fix: build the module from the checkpoint's config, or {_STRICT_FIX}"]
            out.refused += [(n, "in the checkpoint, not in the module") for n in out.unexpected]

    for index, e in enumerate(kept):
        out.kept.append(index)
    proven_elsewhere = [e for e in kept if _stored_names(e, view, stored)]
    if strict and proven_elsewhere:
        names = [e.names[0] for e in proven_elsewhere]
        shown = ", ".join(names[:3]) + (", …" if len(names) > 3 else "")
        # Not "was it built on meta?": after torch's own hint (to_empty() in place of to()) it was,
        # and its tensors now hold uninitialized memory on a device.
        out.summary += [f"{len(names)} tensor{'s' if len(names) != 1 else ''} the checkpoint has "
                        f"{'are' if len(names) != 1 else 'is'} not on meta ({shown}): moved off meta with "
                        "to_empty() they hold uninitialized memory, built on a device their initial values; "
                        "metaload would keep either unread and unproven",
                        "  fix: overwrite=True reads the checkpoint into them where they are; or call "
                        "materialize on the model still on meta, in place of to_empty() (it allocates and "
                        "fills what each rank holds); strict=False keeps them (reported as kept)"]
        out.refused += [(n, "not on meta: kept unread") for n in names]
    return out
