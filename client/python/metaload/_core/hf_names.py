"""Module tensor names -> the checkpoint tensors they are read from, the way transformers maps
them when it loads: its conversion mapping for the model (``get_model_conversion_mapping``:
renamings such as Mixtral's ``block_sparse_moe`` -> ``mlp``, converters that fuse per-expert
tensors into one, the user's ``key_mapping``) and its ``base_model_prefix`` rule (a base
``AutoModel`` reads a ``...ForCausalLM`` checkpoint by stripping ``model.``, and the other way
round), both applied by transformers' own ``rename_source_key`` to every stored name. metaload
holds no renaming rules of its own: a checkpoint layout transformers does not convert keeps its
names, and a converter metaload cannot express as stored pieces is refused naming the tensor.

A fused tensor is expressed as the stored tensors it is made of, as transformers' operations
describe it (``MergeModulelist(dim=0)`` stacks the experts of each source pattern,
``Concatenate(dim=d)`` puts the patterns side by side on d, after a merge or alone), so that
bytes go straight from the files into this rank's part of it: a Piece is (stored name, region
start, region length, stacked); a stacked region's first dimension has length 1 (the stored
tensor is one expert's slab of the stacked tensor and has one dimension fewer), any other region
has the stored tensor's own shape. A tensor transformers cuts out of a stored one
(``Chunk(dim=d)``, ``Split(dim=d)``) is one Piece covering it whole, read from the box of the stored tensor that
transformers' own converter gives it (``Piece.stored_start``).

A module wrapped by the user (names ``lm.model...`` where the checkpoint has ``model...``) is
refused naming the prefix to strip, before anything is allocated.

Not thread-safe; called once per materialize.
"""
from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union, cast

import torch

from .._errors import BadInputError

if TYPE_CHECKING:
    from transformers.core_model_loading import WeightConverter, WeightRenaming, WeightTransform

class Piece(NamedTuple):
    """A region of a module tensor (``start``, ``length``: module coordinates) and the box of a
    stored tensor that holds it (from ``stored_start``, of the region's length)."""

    stored: str
    start: List[int]
    length: List[int]
    stacked: bool  # the region has one leading dimension (of length 1) the stored tensor lacks
    stored_shape: List[int]
    stored_start: List[int]  # zeros, but for a part of a stored tensor (Chunk)

    @property
    def whole(self) -> bool:
        """Whether the region is all of the stored tensor."""
        return list(self.length[1 if self.stacked else 0:]) == list(self.stored_shape)


@dataclass(frozen=True)
class Read:
    """How one module tensor is read: a stored tensor, or the stored pieces of a fused one."""

    stored: str  # the stored name (a fused tensor: the module's own name)
    pieces: Optional[List[Piece]] = None
    #: The transformers rule(s) that mapped it ("" when the module's name is the stored one).
    rule: str = ""


@dataclass
class NameMap:
    """The checkpoint reads of a module's tensors, and how to spell its other names (rotary
    buffers, tied aliases) as the checkpoint's skeleton does."""

    reads: Dict[str, Read] = field(default_factory=dict)
    #: The renamings as transformers reverts them when it saves (revert_weight_conversion): how
    #: a name the checkpoint does not store is spelled in it.
    reverse: List["WeightRenaming"] = field(default_factory=list)
    #: The base_model_prefix ("model.") the checkpoint has and the module lacks ("stripped"),
    #: or the other way round ("added"); "" when they agree.
    prefix: str = ""
    prefix_change: str = ""

    @property
    def prefix_rule(self) -> str:
        """The prefix change, as the report names it ("" for none)."""
        return f"transformers base_model_prefix {self.prefix[:-1]!r} {self.prefix_change}" if self.prefix else ""

    def checkpoint_name(self, module_name: str) -> Tuple[str, str]:
        """A module name the checkpoint does not store, spelled as the checkpoint's skeleton
        spells it (ties, computed buffers), and the rule that changed it ("" for none)."""
        rules = []
        spelled = module_name
        if self.reverse:
            from transformers.core_model_loading import apply_renamings

            spelled = apply_renamings(module_name, self.reverse)
            rules = [f"transformers {r!r}" for r in self.reverse if r.rename_source_key(module_name)[0] != module_name]
        if self.prefix_change == "stripped":
            spelled, rules = self.prefix + spelled, rules + [self.prefix_rule]
        elif self.prefix_change == "added" and spelled.startswith(self.prefix):
            spelled, rules = spelled[len(self.prefix):], rules + [self.prefix_rule]
        return spelled, "; ".join(rules)


def map_names(model: torch.nn.Module, shapes: Mapping[str, Sequence[int]], stored: Mapping[str, object], *,
              stored_shapes: Mapping[str, Sequence[int]], model_name: str,
              key_mapping: Optional[Mapping[str, str]] = None) -> NameMap:
    """The reads of every module tensor (``shapes``: each name's whole shape) the checkpoint
    holds, by transformers' rules for ``model``. Raises BadInputError for a user's wrapper
    prefix and for a fused tensor metaload cannot read as stored pieces."""
    transforms, saved_with, base_model_prefix = _transforms(model, key_mapping)
    out = NameMap()
    if saved_with:
        from transformers.core_model_loading import WeightRenaming

        reverted = (t.reverse_transform() for t in saved_with[::-1] if isinstance(t, WeightRenaming))
        out.reverse = [r for r in reverted if isinstance(r, WeightRenaming)]
    if transforms or base_model_prefix:
        _apply_transformers(out, model, transforms, base_model_prefix, shapes, stored, stored_shapes)
    else:
        for name in shapes:
            if name in stored:
                out.reads[name] = Read(name)
    if not out.reads and shapes:
        _refuse_a_wrapper(list(shapes), stored, model_name)
    return out


Transforms = List["WeightTransform"]


def _transforms(model: torch.nn.Module,
                key_mapping: Optional[Mapping[str, str]]) -> Tuple[Transforms, Transforms, Optional[str]]:
    """transformers' conversion mapping for `model` as it loads, the same as it saves (without
    its legacy renamings), and its base_model_prefix: none for a module transformers did not
    build (transformers is not even imported for one)."""
    modeling = sys.modules.get("transformers.modeling_utils")
    mapping = dict(key_mapping) if key_mapping else None
    if modeling is not None and isinstance(model, modeling.PreTrainedModel):
        from transformers.conversion_mapping import get_model_conversion_mapping

        quantizer = _kept_quantizer(model)
        with _classes_transformers_built(model, modeling.PreTrainedModel):
            return (get_model_conversion_mapping(model, mapping, hf_quantizer=quantizer),
                    get_model_conversion_mapping(model, mapping, add_legacy=False), model.base_model_prefix or None)
    if mapping:
        from transformers.core_model_loading import WeightRenaming

        renamings: Transforms = [WeightRenaming(source_patterns=k, target_patterns=v) for k, v in mapping.items()]
        return renamings, list(renamings), None
    return [], [], None


def _kept_quantizer(model: torch.nn.Module) -> Any:
    """transformers' own quantizer of a model that holds its quantized weights as stored (FP8
    codes beside ``*_scale_inv`` parameters, as its FP8Linear and FP8Experts do), pre-quantized as
    from_pretrained makes it: its conversions fuse the per-expert scales as the codes are fused
    (``experts.*.gate_proj.weight_scale_inv`` -> ``experts.gate_up_proj_scale_inv``). None for
    any other model: for one built in a float dtype the quantizer would add a dequantizing
    operation, which metaload does itself (``dequantize=True``)."""
    config = getattr(getattr(model, "config", None), "quantization_config", None)
    if config is None or not any(n.endswith("_scale_inv") for n, _ in model.named_parameters()):
        return None
    from transformers.quantizers.auto import AutoHfQuantizer

    return AutoHfQuantizer.from_config(config, pre_quantized=True)


@contextlib.contextmanager
def _classes_transformers_built(model: torch.nn.Module, pretrained: type) -> Iterator[None]:
    """The module's classes as transformers built them, for the time of the block.

    fully_shard gives each module it shards a class of its own (``FSDPGteModel``, made in torch's
    module, a subclass of FSDPModule and ``GteModel``); transformers looks a conversion mapping up
    by class name and skips classes defined outside transformers as custom code, so a sharded
    root model would get none (from_pretrained never sees one sharded: it loads first)."""
    from torch.distributed.fsdp import FSDPModule

    swapped: List[Tuple[torch.nn.Module, type]] = []
    try:
        for module in model.modules():
            cls: type = type(module)
            if isinstance(module, FSDPModule) and isinstance(module, pretrained):
                built: Optional[type] = next((b for b in cls.__bases__ if issubclass(b, pretrained)), None)
                if built is not None:
                    swapped.append((module, cls))
                    setattr(module, "__class__", built)
        yield
    finally:
        for module, cls in swapped:
            setattr(module, "__class__", cls)


def _apply_transformers(out: NameMap, model: torch.nn.Module, transforms: List["WeightTransform"],
                        base_model_prefix: Optional[str],
                        shapes: Mapping[str, Sequence[int]], stored: Mapping[str, object],
                        stored_shapes: Mapping[str, Sequence[int]]) -> None:
    """transformers' loop over the checkpoint (convert_and_load_state_dict_in_model): every
    stored name, in its order, renamed by rename_source_key; those whose new name the module
    has are read into it, through their converter when one matched."""
    from transformers.core_model_loading import WeightConverter, WeightRenaming, dot_natural_key, rename_source_key

    renamings = [t for t in transforms if isinstance(t, WeightRenaming)]
    converters = [t for t in transforms if isinstance(t, WeightConverter)]
    by_pattern = {pattern: c for c in converters for pattern in c.source_patterns}
    # transformers asks only whether a name is there (meta_state_dict.get(name) is not None).
    module: Dict[str, bool] = {name: True for name in shapes}
    # target -> (converter, source pattern -> stored names in transformers' order)
    fused: Dict[str, Tuple["WeightConverter", Dict[str, List[str]]]] = {}
    for key in sorted(stored, key=dot_natural_key):
        renamed, pattern = rename_source_key(key, renamings, converters)
        target, _ = rename_source_key(renamed, [], [], base_model_prefix, module)
        if target not in module and key in module:
            # transformers: a name the rules should have left alone, the prefix aside.
            renamed, pattern = key, None
            target, _ = rename_source_key(key, [], [], base_model_prefix, module)
        if target not in module:
            continue
        if target != renamed and base_model_prefix and not out.prefix_change:
            out.prefix = base_model_prefix + "."
            out.prefix_change = "stripped" if renamed == out.prefix + target else "added"
        if pattern is not None:
            converter = by_pattern[pattern]
            lists = fused.setdefault(target, (converter, {p: [] for p in converter.source_patterns}))[1]
            lists[pattern].append(key)
        elif target not in out.reads:
            rules = [f"transformers {r!r}" for r in renamings if _renames(r, key)]
            if target != renamed:
                rules.append(out.prefix_rule)
            out.reads[target] = Read(key, rule="; ".join(rules))
    for target, (converter, lists) in fused.items():
        rule = "; ".join(r for r in (f"transformers {converter!r} operations={converter.operations!r}",
                                     out.prefix_rule) if r)
        if _is_chunk(converter):
            for name, piece in _chunks(model, target, converter, lists, shapes, stored_shapes).items():
                out.reads[name] = Read(name, [piece], rule)
            continue
        out.reads[target] = Read(target, _pieces(target, converter, lists, shapes[target], stored_shapes), rule)


def _renames(renaming: "WeightTransform", key: str) -> bool:
    """Whether `renaming` alone changes `key` (for the report: which rule fired)."""
    return renaming.rename_source_key(key)[0] != key


def _pieces(target: str, converter: "WeightConverter", lists: Dict[str, List[str]], shape: Sequence[int],
            stored_shapes: Mapping[str, Sequence[int]]) -> List[Piece]:
    """The pieces of a fused tensor as the converter's operations build it: MergeModulelist(dim=0)
    stacks each pattern's stored tensors in order, then Concatenate(dim=d) (when there are several
    patterns) joins the stacks on d; Concatenate(dim=d) alone joins one stored tensor of each
    pattern on d, in the patterns' order. Every other operation is refused: its bytes are not the
    stored ones placed side by side. The pieces must tile `shape` exactly."""
    from transformers.core_model_loading import Concatenate, MergeModulelist

    ops = converter.operations
    if len(ops) == 1 and isinstance(ops[0], Concatenate) and all(len(keys) <= 1 for keys in lists.values()):
        dim = ops[0].dim + len(shape) if ops[0].dim < 0 else ops[0].dim
        return _concatenated(target, dim, [keys[0] for keys in lists.values() if keys], shape, stored_shapes)
    merge_ok = len(ops) >= 1 and isinstance(ops[0], MergeModulelist) and ops[0].dim == 0
    concat_dim = None
    if len(ops) == 2 and isinstance(ops[1], Concatenate) and ops[1].dim >= 1:
        concat_dim = ops[1].dim
    if not merge_ok or len(ops) > 2 or (len(ops) == 2) != (concat_dim is not None) or \
            (concat_dim is None and len(lists) > 1):
        stored = [k for keys in lists.values() for k in keys]
        more = f" and {len(stored) - 3} more" if len(stored) > 3 else ""
        raise BadInputError(f"{target}: transformers builds it from {', '.join(stored[:3])}{more} by {ops!r}, which "
                            "metaload cannot read as stored pieces")
    pieces: List[Piece] = []
    offset = 0
    for pattern, keys in lists.items():
        if not keys:
            continue
        each = list(stored_shapes[keys[0]])
        stacked = [len(keys)] + each
        dim = concat_dim if concat_dim is not None else 0
        want = list(shape)
        if dim:
            want[dim] = stacked[dim]
        if stacked != want or any(list(stored_shapes[k]) != each for k in keys):
            raise BadInputError(f"{target}: the module's shape is {list(shape)}, but the checkpoint's {pattern} "
                                f"tensors ({len(keys)} of shape {each}) do not make it: another size of this model?")
        for e, key in enumerate(keys):
            start = [e] + [0] * len(each)
            if dim:
                start[dim] = offset
            pieces.append(Piece(key, start, [1] + each, True, each, [0] * len(each)))
        offset += stacked[dim] if dim else 0
    if concat_dim is not None and offset != shape[concat_dim]:
        raise BadInputError(f"{target}: the module's shape is {list(shape)}, but the checkpoint's tensors for it "
                            f"({', '.join(lists)}) give {offset} on dimension {concat_dim}")
    return pieces


def _is_chunk(converter: "WeightConverter") -> bool:
    """Whether the converter cuts one stored tensor into parts along a dimension (Chunk: equal
    parts; Split: parts sized like the module's tensors)."""
    from transformers.core_model_loading import Chunk, Split

    return len(converter.operations) == 1 and isinstance(converter.operations[0], (Chunk, Split))


def _chunks(model: torch.nn.Module, first: str, converter: "WeightConverter", lists: Dict[str, List[str]],
            shapes: Mapping[str, Sequence[int]], stored_shapes: Mapping[str, Sequence[int]]) -> Dict[str, Piece]:
    """Chunk(dim) or Split(dim) alone: each module tensor it makes is one part of one stored
    tensor along dim.
    Which part, and under which module name, is transformers' own answer: the converter runs as
    from_pretrained runs it (add_tensor, then convert), on the stored tensor's indices along dim
    in place of its values."""
    import copy
    from concurrent.futures import Future

    from transformers.core_model_loading import Chunk, Split

    stored = [k for keys in lists.values() for k in keys]
    if len(stored) != 1:
        raise BadInputError(f"{first}: transformers builds it from {', '.join(stored[:3])} by "
                            f"{converter.operations!r}, which metaload cannot read as stored pieces")
    key, pattern = stored[0], next(p for p, keys in lists.items() if keys)
    whole = list(stored_shapes[key])
    op = cast(Union[Chunk, Split], converter.operations[0])
    dim = op.dim + len(whole) if op.dim < 0 else op.dim
    if not 0 <= dim < len(whole):
        raise BadInputError(f"{first}: transformers chunks {key} (shape {whole}) on dimension {op.dim}, which it "
                            "does not have")
    indices: "Future[torch.Tensor]" = Future()
    indices.set_result(torch.arange(whole[dim]).reshape([n if d == dim else 1 for d, n in enumerate(whole)]))
    mapping = copy.deepcopy(converter)  # as transformers: a converter of its own for each target
    mapping.add_tensor(first, key, pattern, indices)
    parts = mapping.convert(first, model=model, config=getattr(model, "config", None))
    out: Dict[str, Piece] = {}
    for name, part in parts.items():
        held = (part[0] if isinstance(part, list) else part).reshape(-1)
        start, length = int(held[0]) if held.numel() else 0, held.numel()
        want = list(whole)
        want[dim] = length
        if not torch.equal(held, torch.arange(start, start + length)) or name not in shapes or \
                list(shapes[name]) != want:
            raise BadInputError(f"{name}: transformers reads it as a part of {key} (shape {whole}), which does not "
                                f"give the module's shape {list(shapes[name]) if name in shapes else 'none'}: "
                                "another size of this model?")
        stored_start = [0] * len(whole)
        stored_start[dim] = start
        out[name] = Piece(key, [0] * len(whole), want, False, whole, stored_start)
    return out


def _concatenated(target: str, dim: int, keys: List[str], shape: Sequence[int],
                  stored_shapes: Mapping[str, Sequence[int]]) -> List[Piece]:
    """Concatenate(dim) alone: each pattern's one stored tensor (`keys`, in the patterns' order)
    after the last on `dim`, every other dimension the module's own."""
    pieces: List[Piece] = []
    offset = 0
    for key in keys:
        each = list(stored_shapes[key])
        if not 0 <= dim < len(shape) or len(each) != len(shape) or \
                any(n != m for d, (n, m) in enumerate(zip(each, shape)) if d != dim):
            raise BadInputError(f"{target}: the module's shape is {list(shape)}, but the checkpoint's {key} is "
                                f"{each}, which transformers concatenates into it on dimension {dim}: another size "
                                "of this model?")
        start = [0] * len(shape)
        start[dim] = offset
        pieces.append(Piece(key, start, each, False, each, [0] * len(each)))
        offset += each[dim]
    if offset != shape[dim]:
        raise BadInputError(f"{target}: the module's shape is {list(shape)}, but the checkpoint's tensors for it "
                            f"({', '.join(keys)}) give {offset} on dimension {dim}")
    return pieces


def _refuse_a_wrapper(names: List[str], stored: Mapping[str, object], model_name: str) -> None:
    """Raises when every module name starts with one prefix the checkpoint lacks and the names
    without it are the checkpoint's (the user wrapped the model in another module)."""
    suffixes = {k.split(".", 1)[1] for k in stored if "." in k}
    parts = [n.split(".") for n in names]
    for depth in range(1, min(len(p) for p in parts)):
        prefix = ".".join(parts[0][:depth]) + "."
        if not all(n.startswith(prefix) for n in names) or any(k.startswith(prefix) for k in stored):
            return
        inner = [n[len(prefix):] for n in names]
        if any(n in stored or n in suffixes for n in inner):
            raise BadInputError(f"{model_name}: every module name starts with '{prefix}' and the checkpoint has none "
                                f"of them: strip it? (materialize the module the checkpoint was saved from, "
                                f"model.{prefix[:-1]})")
