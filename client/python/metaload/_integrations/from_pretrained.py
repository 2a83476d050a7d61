"""from_pretrained(): transformers' own model, built on meta and parallelized as transformers does
it, filled by metaload (only this rank's shards, streamed where the host cannot see the files).

Every step that decides what the model is, is transformers' own public machinery, called in the
order its `from_pretrained` calls it (modeling_utils.py, 5.24): `prepare_distribute_model` (the
mesh), the class's `get_init_context` (meta device, dtype, `no_tie_weights`), the constructor,
`maybe_distribute_model` (PP, TP, EP, FSDP2/HSDP plans), and after the weights `tie_weights` with
the keys the checkpoint lacks, `eval()`. Only the weight loading in between is metaload's
(`materialize`).
"""
from __future__ import annotations

import copy
import json
import os
from typing import Any, Dict, List, Optional, Set, Tuple, Union

import torch

from .. import _native
from .._env import rank_and_world, resolve_daemon
from .._errors import BadInputError, Finding, MetaTensorError
from .._core.materialize import materialize
from .._core.progress import ProgressArg, sink as progress_sink
from .._core.report import LoadReport, Provenance
from .._core.verify import JOIN_TIMEOUT_S, collective_device
from .._core.verify import verify_module

# from_pretrained arguments that choose a placement or a format metaload does not read, with
# what to do instead. Refused rather than ignored: each would silently give another model.
_REFUSED = {
    "quantization_config": ("metaload reads the quantization the checkpoint's config.json declares: pass "
                            "dequantize=True (or transformers' FineGrainedFP8Config(dequantize=True) / "
                            "Mxfp4Config(dequantize=True)) to load its values; to quantize a model, quantize "
                            "after loading"),
    "gguf_file": "metaload reads safetensors; convert the GGUF file first",
    "state_dict": "a state_dict is already in memory: use model.load_state_dict",
    "adapter_kwargs": "load the adapter after: model.load_adapter(...)",
    "adapter_name": "load the adapter after: model.load_adapter(...)",
    "offload_folder": "metaload places every tensor on this rank's device; there is no disk offload",
    "offload_buffers": "metaload places every tensor on this rank's device; there is no offload",
    "max_memory": "a memory budget is a device map's: use distributed_config, or `metactl plan`",
    "variant": "metaload reads model.safetensors[.index.json]: point it at the variant's folder",
    "use_kernels": "call model.set_use_kernels(True) after loading",
    "kernel_config": "call model.set_use_kernels(True, kernel_config) after loading",
    "fusion_config": "fused modules change the names metaload maps: not supported yet",
    "disable_mmap": "metaload does not mmap: it reads each rank's byte ranges",
}
# Hub download arguments: metaload reads a local folder or a model registered with a daemon.
_HUB = ("cache_dir", "force_download", "proxies", "token", "revision", "subfolder", "local_files_only",
        "resume_download")
# Accepted for compatibility and without effect here, as in transformers 5.24 itself.
_IGNORED = ("low_cpu_mem_usage", "_fast_init", "weights_only", "use_safetensors", "output_loading_info")


def _model_class(model_class: Any, config: Any) -> Any:
    """The concrete class: `model_class` itself, or the class an Auto class maps `config` to
    (its public mapping, as `AutoModelForCausalLM.from_config` resolves it)."""
    if model_class is None:
        import transformers
        model_class = transformers.AutoModelForCausalLM
    mapping = getattr(model_class, "_model_mapping", None)
    if mapping is None:
        return model_class
    try:
        return mapping[type(config)]
    except KeyError:
        raise BadInputError(f"{model_class.__name__} has no model for a {type(config).__name__} "
                            f"(model_type {getattr(config, 'model_type', '?')!r}): pass model_class=") from None


def _dtype(dtype: Union[None, str, torch.dtype], config: Any, view: _native.ModelView) -> torch.dtype:
    """As from_pretrained resolves it: None/"auto" is the config's dtype, else the first floating
    dtype the checkpoint stores; a name or a torch.dtype is that dtype."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype is None or dtype == "auto":
        declared = getattr(config, "dtype", None)
        if isinstance(declared, torch.dtype):
            return declared
        if isinstance(declared, str) and isinstance(getattr(torch, declared, None), torch.dtype):
            return getattr(torch, declared)  # type: ignore[no-any-return]
        for stored in view.stored().values():
            code = stored.torch_dtype  # FP8 codes are no model dtype: a quantized checkpoint's scales may be
            if code in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
                return code
        return torch.float32
    if isinstance(dtype, str) and isinstance(getattr(torch, dtype, None), torch.dtype):
        return getattr(torch, dtype)  # type: ignore[no-any-return]
    raise BadInputError(f"dtype={dtype!r}: a torch.dtype, its name (\"bfloat16\") or \"auto\" (a dtype per "
                        "module is not supported)")


def _check_kwargs(kwargs: Dict[str, Any]) -> None:
    for key in list(kwargs):
        if key in _REFUSED:
            raise BadInputError(f"metaload.from_pretrained: {key}= is not supported: {_REFUSED[key]}")
        if key in _HUB and kwargs[key] not in (None, False, "", "main"):
            raise BadInputError(f"metaload.from_pretrained: {key}= is a Hub download option; metaload reads a local "
                                "folder or a model registered with a daemon (huggingface_hub.snapshot_download first)")
        if key in _HUB or key in _IGNORED:
            kwargs.pop(key)


def _device(device_map: Any) -> Optional[str]:
    """One device for the whole model (what a device map of one entry says), or None."""
    if device_map is None:
        return "cpu"  # from_pretrained without a device map loads on the CPU
    if isinstance(device_map, dict) and set(device_map) == {""}:
        device_map = device_map[""]
    if isinstance(device_map, int):
        return f"cuda:{device_map}"
    if isinstance(device_map, (str, torch.device)) and str(device_map) not in ("auto", "balanced", "sequential",
                                                                                  "balanced_low_0"):
        return str(device_map)
    raise BadInputError(f"device_map={device_map!r}: metaload places the whole model on one device per rank "
                        "(device_map=\"cuda:0\", or distributed_config= for TP/FSDP); for a device map across "
                        "devices use `metactl plan --format hf-device-map`")


def _config_from_json(text: str, where: str, kwargs: Dict[str, Any]) -> Any:
    """The transformers config a config.json's text gives, as ``AutoConfig.from_pretrained`` ends:
    the class its ``model_type`` names, ``from_dict`` with the caller's overrides; what no config
    field takes stays in ``kwargs`` for the model's constructor, as from_pretrained leaves it."""
    import transformers
    values = json.loads(text)
    model_type = values.get("model_type") if isinstance(values, dict) else None
    if not model_type:
        raise BadInputError(f"the config.json of {where} has no model_type: pass config= (a transformers config, "
                            "or the path of its config.json)")
    if model_type not in transformers.CONFIG_MAPPING:
        raise BadInputError(f"the config.json of {where} has model_type {model_type!r}, which this transformers "
                            f"({transformers.__version__}) does not know: upgrade it, or pass config=")
    config, unused = transformers.CONFIG_MAPPING[model_type].from_dict(values, return_unused_kwargs=True, **kwargs)
    kwargs.clear()
    kwargs.update(unused)
    return config


def _config_at(location: str, kwargs: Dict[str, Any]) -> Any:
    """config= given as a location: a config.json, or the folder that holds one."""
    kind = _native.location_kind(location)
    if kind == "folder":
        return _config_from_json(_native.read_config_json(location), location, kwargs)
    if kind == "file":
        return _config_from_json(_native.read_small_file(location, "config.json"), location, kwargs)
    raise BadInputError(f"config={location!r}: no such file or folder (a config.json, or the folder holding one)")


def _source(path: str, daemon: Optional[str], config: Any, kwargs: Dict[str, Any],
            timeout_s: float) -> Tuple[str, str, Any, _native.ModelView]:
    """(name, checkpoint location or "", config, the opened model): a folder this host reads (a
    POSIX path or a location of a storage back end, "mem://..."), or a registered model (its
    config.json from the daemon's answer, unless `config` is given). Every file read here goes
    through the core's storage seam."""
    import transformers
    config_kwargs = {k: kwargs.pop(k) for k in ("trust_remote_code",) if k in kwargs}
    if _native.location_kind(path) == "folder":
        folder = _native.normal_location(path)
        if config is None:
            text = _native.read_config_json(folder)
            if "auto_map" not in json.loads(text):
                config = _config_from_json(text, folder, kwargs)
            elif _native.location_scheme(folder):
                raise BadInputError(f"{folder}: its config.json names custom code (auto_map), which transformers "
                                    "imports from a folder on this host: download the checkpoint, or pass config=")
            else:  # custom code: transformers imports it from the folder itself
                config, unused = transformers.AutoConfig.from_pretrained(folder, return_unused_kwargs=True,
                                                                         **config_kwargs, **kwargs)
                kwargs.clear()
                kwargs.update(unused)
        elif isinstance(config, (str, os.PathLike)):
            config = _config_at(os.fspath(config), kwargs)
        name = _native.location_name(folder)
        return name, folder, config, _native.open_model(name, daemon="", checkpoint=folder, timeout_s=timeout_s)
    address = resolve_daemon(daemon)
    if not address:
        raise BadInputError(f"{path!r} is not a folder on this host, and no daemon was given (daemon= or "
                            "$METAD_ADDRESS) to ask for a model registered under that name; Hub ids are "
                            "downloaded first (huggingface_hub.snapshot_download)")
    view = _native.open_model(path, daemon=address, checkpoint="", timeout_s=timeout_s)
    if config is None:
        if not view.hf_config_json:
            raise BadInputError(f"model {path!r} was registered without a config.json beside its checkpoint: pass "
                                "config= (a transformers config, or the path of its config.json)")
        config = _config_from_json(view.hf_config_json, f"model {path!r} (as registered)", kwargs)
    elif isinstance(config, (str, os.PathLike)):
        config = _config_at(os.fspath(config), kwargs)
    return path, "", config, view


def from_pretrained(path_or_registered_name: Union[str, os.PathLike[str]], *model_args: Any,
                    distributed_config: Any = None, device_mesh: Any = None,
                    dtype: Union[None, str, torch.dtype] = None, daemon: Optional[str] = None,
                    model_class: Any = None, config: Any = None, device_map: Any = None, source: str = "auto",
                    key_mapping: Optional[Dict[str, str]] = None, strict: bool = True, verify: bool = True,
                    read_threads: int = 2, timeout_s: float = 600.0, verify_timeout_s: float = JOIN_TIMEOUT_S,
                    output_loading_info: bool = False, require_proof: bool = False, dequantize: bool = False,
                    progress: ProgressArg = None, **kwargs: Any) -> Any:
    """``AutoModelForCausalLM.from_pretrained(path, distributed_config=...)``, filled by metaload.

        model = metaload.from_pretrained("/models/qwen2-7b",
                                         distributed_config=DistributedConfig(tp_size=2, fsdp_size=2))
        model = metaload.from_pretrained("qwen2-7b", daemon="10.0.0.1:7070")   # a registered model

    The model is transformers' own class (``model_class``: an Auto class, default
    ``AutoModelForCausalLM``, or a concrete one), config and parallel plans: TP, FSDP2, HSDP
    (``dp_replicate_size``), PP as ``maybe_distribute_model`` applies them, built on meta under
    the class's own init context; then ``metaload.materialize`` fills exactly this rank's local
    shards and verifies across ranks, and ``tie_weights`` ties what the checkpoint stores once
    (``lm_head`` = ``embed_tokens``), as from_pretrained ties it. The result equals
    ``from_pretrained(..., distributed_config=...)`` bit for bit.

    ``path_or_registered_name``: a Hugging Face folder this host reads (config.json +
    safetensors), or the name of a model registered with the daemon at ``daemon`` (default
    ``$METAD_ADDRESS``); its config.json then comes from the daemon and its bytes are read where
    this host sees the files, else streamed (``source="auto"|"direct"|"stream"``).

    ``dtype``: as from_pretrained (None or ``"auto"``: the config's, else the checkpoint's).
    ``device_map``: one device for the whole model (default the CPU, as from_pretrained; with
    ``distributed_config``, the mesh's device for this LOCAL_RANK). Config overrides and model
    kwargs pass through as from_pretrained takes them; ``attn_implementation``, ``key_mapping``
    and ``trust_remote_code`` too. Arguments that would give another model here
    (``quantization_config``, ``gguf_file``, multi-device maps, offload, Hub downloads, ...) raise
    BadInputError saying what to do instead. ``strict``, ``verify``, ``read_threads``,
    ``timeout_s``, ``require_proof`` are ``materialize``'s: the report says "verified" only
    when every tensor's content is proven against its registered digest (a folder's:
    ``metactl digest``) or computed by a rule. ``output_loading_info=True`` returns ``(model, info)``
    with transformers' keys (missing/unexpected/mismatched/error_msgs) and ``"metaload"``: the
    LoadReport (also ``model.metaload_report``).

    ``progress``: as ``materialize`` takes it — by default a "Loading weights" bar on the node's
    first rank unless transformers' progress bars are off; ``tqdm_class`` (transformers' download
    bars' class) draws it.

    A quantized checkpoint (FP8 block-scaled as DeepSeek-V3/R1 and Qwen3 FP8 ship,
    compressed-tensors FP8, gpt-oss MXFP4) loads into the model in ``dtype`` with
    ``dequantize=True`` — or transformers' own spelling, ``quantization_config=
    FineGrainedFP8Config(dequantize=True)`` / ``Mxfp4Config(dequantize=True)``: each rank reads
    only its shards' codes and the scale blocks covering them (``materialize``'s ``dequantize``).
    """
    if "torch_dtype" in kwargs:
        torch_dtype = kwargs.pop("torch_dtype")
        dtype = dtype if dtype is not None else torch_dtype
    tp_plan, tp_size = kwargs.pop("tp_plan", None), kwargs.pop("tp_size", None)
    attn_implementation = kwargs.pop("attn_implementation", None)
    if kwargs.get("quantization_config") is not None and _asks_to_dequantize(kwargs["quantization_config"]):
        kwargs.pop("quantization_config")
        dequantize = True
    tqdm_class = kwargs.pop("tqdm_class", None)
    _check_kwargs(kwargs)
    from transformers.distributed.configuration_utils import DistributedConfig
    if tp_plan is not None or tp_size is not None:
        if distributed_config is not None:
            raise BadInputError("pass either distributed_config or tp_plan/tp_size, not both (as from_pretrained)")
        distributed_config = DistributedConfig(tp_plan=tp_plan, tp_size=tp_size)
    if device_mesh is not None and distributed_config is None:
        raise BadInputError("device_mesh= alone parallelizes nothing: pass distributed_config=DistributedConfig("
                            "tp_size=..., fsdp_size=...), from which transformers builds the mesh")
    if distributed_config is not None and device_map is not None:
        raise BadInputError("distributed_config and device_map are mutually exclusive (as in from_pretrained): the "
                            "mesh places each rank on its LOCAL_RANK's device")
    name, folder, config, view = _source(os.fspath(path_or_registered_name), daemon, config, kwargs, timeout_s)
    torch_dtype_resolved = _dtype(dtype, config, view)
    cls = _model_class(model_class, config)

    distributed_config, _, mesh_manager = cls.prepare_distribute_model(distributed_config)
    config = copy.deepcopy(config)
    config.name_or_path = folder or name
    if attn_implementation is not None:
        config._attn_implementation = attn_implementation
    if distributed_config is not None:
        config.distributed_config = distributed_config
    from transformers.utils.generic import ContextManagers
    with ContextManagers(cls.get_init_context(torch_dtype_resolved, False, False, None)):
        model = cls(config, *model_args, **kwargs)
    _apply_dtype_plan(model, torch_dtype_resolved)
    model = cls.maybe_distribute_model(model, distributed_config, mesh_manager)

    # Tied as from_pretrained ties them once loaded: tie_weights with the keys the checkpoint
    # lacks (lm_head -> embed_tokens), after the fill, since FSDP2 re-registers each sharded
    # parameter while allocating. What it will tie is not read; a pair the checkpoint stores
    # both of is read apart, and materialize ties it again where the values are equal.
    stored = set(view.stored())
    missing = {name for name, _ in model.named_parameters(remove_duplicate=False) if name not in stored}
    tied_after = _tied_after(model, missing)
    device = None if mesh_manager is not None else _device(device_map)
    # A pipeline stage holds some layers only: each checkpoint tensor must have a place on some
    # stage, not on each (checked across the ranks after the fill).
    stages = distributed_config is not None and distributed_config.pp_size > 1
    report = materialize(model, name, daemon=None if folder else resolve_daemon(daemon), device=device,
                         checkpoint=folder or None, source=source, strict=strict and not stages, verify=False,
                         read_threads=read_threads, timeout_s=timeout_s, key_mapping=key_mapping,
                         dequantize=dequantize, _tied_after=tied_after,
                         progress=progress_sink(progress, rank_and_world()[0], tqdm_class=tqdm_class) or False)
    if stages and strict:
        _every_tensor_placed_on_some_rank(name, report, stored, verify_timeout_s)
    model.tie_weights(missing_keys=missing, recompute_mapping=False)
    for target, source_name in tied_after.items():
        report._note(target, Provenance("tied", tied_to=source_name), f"tied:{source_name}")
    if verify:
        # The cluster's own rule too (require_digests in the coordinator's node config).
        report._note_verified(verify_module(model, timeout_s=verify_timeout_s,
                                            require_proof=require_proof or view.proof_required))
    model.eval()
    _generation_config(model, folder)
    model.metaload_report = report
    if output_loading_info:
        return model, _loading_info(report)
    return model


def _asks_to_dequantize(quantization_config: Any) -> bool:
    """transformers' spelling of a dequantizing load: a quantization config with
    ``dequantize=True`` (FineGrainedFP8Config, Mxfp4Config) or ``run_compressed=False``
    (CompressedTensorsConfig)."""
    get = quantization_config.get if isinstance(quantization_config, dict) else (
        lambda key, default=None: getattr(quantization_config, key, default))
    return get("dequantize", False) is True or get("run_compressed", True) is False


def _every_tensor_placed_on_some_rank(name: str, report: LoadReport, stored: Set[str], timeout_s: float) -> None:
    """Under pipeline parallelism: MetaTensorError naming the checkpoint tensors no rank holds.
    One all-reduce of a count per stored tensor (the checkpoint's names, alike on every rank), run
    by the core as verification runs its own: it waits at most `timeout_s` (all_gather_object
    waited for the group's timeout), unpickles nothing a peer sent, and its tensors have no Python
    object (docs/python.md)."""
    import torch.distributed as dist
    names = sorted(stored)
    placed_here = stored - set(report.unexpected)
    group = dist.group.WORLD
    counts = _native.sum_int64(group, device=str(collective_device(group)),
                               values=[1 if n in placed_here else 0 for n in names],
                               what="the pipeline stages' check that every tensor has a place", timeout_s=timeout_s)
    nowhere = [n for n, count in zip(names, counts) if count == 0]
    if nowhere:
        listed = ", ".join(nowhere[:8]) + (", …" if len(nowhere) > 8 else "")
        counted = f"1 tensor of {name} has" if len(nowhere) == 1 else f"{len(nowhere)} tensors of {name} have"
        raise MetaTensorError(f"{counted} a place on no pipeline stage ({listed}): another size of this model?",
                              [Finding(tensor, -1, "no pipeline stage holds it") for tensor in nowhere])


def _apply_dtype_plan(model: Any, dtype: Optional[torch.dtype]) -> None:
    """transformers' dtype plan, as its from_pretrained applies it while loading: the tensors
    ``_keep_in_fp32_modules`` (under float16) and ``_keep_in_fp32_modules_strict`` (under float16
    and bfloat16) name are held in float32. Its own rule (``_get_dtype_plan``) and matching
    (``build_glob_alternation``, searched in each name), on the meta tensors before the fill, so
    that every rank reads them into float32."""
    if dtype is None:
        return
    plan = model._get_dtype_plan(dtype)
    if not plan:
        return
    from transformers.core_model_loading import build_glob_alternation
    alternation, group_to_glob, _ = build_glob_alternation(list(plan.keys()))
    for prefix, module in model.named_modules():
        for table in (module._parameters, module._buffers):
            for attr, t in list(table.items()):
                name = f"{prefix}.{attr}" if prefix else attr
                found = alternation.search(name) if t is not None else None
                if found is None or t is None or found.lastgroup is None:
                    continue
                target = plan[group_to_glob[found.lastgroup]]
                if t.dtype == target:
                    continue
                cast = t.detach().to(target)
                table[attr] = torch.nn.Parameter(cast, requires_grad=t.requires_grad) if isinstance(
                    t, torch.nn.Parameter) else cast


def _tied_after(model: Any, missing: Set[str]) -> Dict[str, str]:
    """target -> source of each tie tie_weights(missing_keys=missing) will make: the tied name
    the checkpoint lacks takes the stored one's tensor (either way round, as transformers)."""
    out = {}
    for target, source in getattr(model, "all_tied_weights_keys", {}).items():
        if target in missing and source not in missing:
            out[target] = source
        elif source in missing and target not in missing:
            out[source] = target
    return out


def _generation_config(model: Any, folder: str) -> None:
    """generation_config.json beside the weights, as from_pretrained reads it (its text through
    the storage seam, made into transformers' GenerationConfig by its own from_dict)."""
    if not folder or not model.can_generate():
        return
    location = _native.join_location(folder, "generation_config.json")
    if _native.location_kind(location) == "file":
        from transformers import GenerationConfig
        model.generation_config = GenerationConfig.from_dict(
            json.loads(_native.read_small_file(location, "generation_config.json")))


def _loading_info(report: LoadReport) -> Dict[str, Any]:
    return {"missing_keys": [], "unexpected_keys": list(report.unexpected), "mismatched_keys": [],
            "error_msgs": [], "metaload": report}
