"""metaload.StorageReader: torch.distributed.checkpoint's StorageReader over metaload's readers.

    import torch.distributed.checkpoint as dcp, metaload
    dcp.load(model.state_dict(), storage_reader=metaload.StorageReader("/models/llama-8b"),
             planner=metaload.LoadPlanner())        # the planner: strict accounting, verification

A drop-in for ``HuggingFaceStorageReader``: the same metadata (every stored tensor under its
safetensors name, its dtype and shape, one chunk at offset 0), so DCP's planner makes the same
ReadItems; each rank's items are read in one native call (the C++ library's threads, the GIL
released), straight into the target where it is a contiguous tensor of the stored dtype, else
into a temporary then ``copy_`` (as HuggingFaceStorageReader copies). With a model registered
with a daemon, the layout comes from the daemon, files this host sees are read directly and
the others streamed.
"""
from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple, Union

import torch
from torch.distributed.checkpoint.metadata import (ChunkStorageMetadata, Metadata, MetadataIndex, StorageMeta,
                                                   TensorProperties, TensorStorageMetadata)
from torch.distributed.checkpoint.planner import LoadItemType, LoadPlan, LoadPlanner, ReadItem
from torch.distributed.checkpoint.storage import StorageReader as _DcpStorageReader
from torch.futures import Future

from .. import _native
from .._env import rank_and_world, resolve_daemon
from .._errors import BadInputError, Error, Finding, MetaTensorError
from .._core.marks import Mark, mark_region
from .._core.progress import ProgressArg, tracker as progress_tracker
from .._core.report import LoadReport, Provenance

_SOURCES = ("auto", "direct", "stream")


@dataclass(frozen=True)
class StoredInfo:
    """What Metadata.storage_data holds for each stored tensor: its name, file and layout."""

    name: str
    file: str
    dtype: str  # the safetensors code
    shape: Tuple[int, ...]
    torch_dtype: torch.dtype  # the C++ core's table (_native.StoredTensor.torch_dtype)


class StorageReader(_DcpStorageReader):
    """Reads a Hugging Face safetensors checkpoint for ``dcp.load``: each rank only its ReadItems.

    ``path_or_model_name``: a folder this host sees (``config.json`` optional; one
    ``model.safetensors`` or shards with ``model.safetensors.index.json``), read directly; or the
    name of a model registered with a daemon (``metactl register``; ``daemon=`` or
    ``$METAD_ADDRESS``), whose layout comes from the daemon and whose bytes are read directly
    where this host sees the files, else streamed (``source="auto"|"direct"|"stream"``).
    ``thread_count`` is accepted as ``HuggingFaceStorageReader`` takes it (the read threads);
    ``read_threads`` is metaload's name for it. Every option is keyword-only.

    ``report`` (a LoadReport) says after the load where each tensor came from, the bytes read
    and streamed, the registered digests checked (``metactl register --digest``: a tensor read
    whole is checked), and, with ``planner=metaload.LoadPlanner()``, what verification proved.

    ``dequantize=True``: a quantized checkpoint (docs/quantization.md) is read into the
    state_dict's floating tensors as their values — the metadata then holds each quantized value
    under its own name (gpt-oss's ``experts.gate_up_proj`` beside its ``_blocks`` and
    ``_scales``), and each ReadItem reads only the codes of its chunk and the scales, as
    ``materialize(dequantize=True)`` does. Without it, codes read into a floating tensor are
    refused naming the quantization.

    ``progress``: a bar on the node's first rank for each ``dcp.load``, or a callable of
    ``metaload.LoadProgress``, as ``materialize`` takes it.

    Errors are metaload's, naming the tensors (dcp.load hands them on inside its
    ``CheckpointException``, whose ``failures`` maps each rank to its exception): a state_dict
    tensor still on meta, a read that failed; none leaves a tensor looking filled.
    """

    def __init__(self, path_or_model_name: Union[str, "os.PathLike[str]"], *, daemon: Optional[str] = None,
                 source: str = "auto", thread_count: Optional[int] = None, read_threads: int = 2,
                 timeout_s: float = 600.0, dequantize: bool = False, progress: ProgressArg = None) -> None:
        super().__init__()
        self._dequantize = dequantize
        self._progress = progress
        if source not in _SOURCES:
            raise BadInputError(f"source {source!r} is not one of {', '.join(_SOURCES)}")
        if thread_count is not None:
            if read_threads not in (2, thread_count):
                raise BadInputError(f"thread_count={thread_count} and read_threads={read_threads}: give one of them")
            read_threads = thread_count
        if not isinstance(read_threads, int) or read_threads < 1:
            raise BadInputError(f"read_threads {read_threads!r} is not a positive integer")
        self._daemon_arg = daemon
        self._source = source
        self._read_threads = read_threads
        self._timeout_s = timeout_s
        self._storage_data: Dict[MetadataIndex, StoredInfo] = {}
        self._proofs: List[_native.Proof] = []  # of the last read_data: what its reads prove
        self.load_id = uuid.uuid4().hex
        self._open(os.fspath(path_or_model_name))

    def _open(self, target: str) -> None:
        """Opens the checkpoint: its layout, from the folder's headers or from the daemon."""
        self._target = target
        checkpoint, daemon, name = "", resolve_daemon(self._daemon_arg), target
        # Through the storage seam: a scheme no back end of this build serves is refused there.
        if _native.location_kind(target) == "folder":
            if self._daemon_arg:
                raise BadInputError(f"{target!r} is a folder, read directly, and daemon={self._daemon_arg!r} serves "
                                    "registered models: give the folder or the registered name with daemon=")
            checkpoint, daemon = target, ""
            name = _native.location_name(target)
            if self._source == "stream":
                raise BadInputError(f"source='stream' streams from a daemon: register {target} with one "
                                    "(metactl register) and pass the model's name with daemon=")
        elif os.sep in target or target.startswith((".", "~")):  # a location ("mem://x/y") holds one too
            raise BadInputError(f"{target!r}: no such folder on this host (a model registered with a daemon is "
                                "named without slashes)")
        elif not daemon:
            raise BadInputError(f"{target!r} is not a folder on this host; to read a model registered with a daemon, "
                                "pass daemon='HOST:PORT' or set METAD_ADDRESS")
        self._view = _native.open_model(name, daemon=daemon, checkpoint=checkpoint, timeout_s=self._timeout_s)
        rank, world = rank_and_world()
        self.report = LoadReport(model=name, rank=rank, world_size=world, device="")

    @property
    def checkpoint_id(self) -> str:
        """The folder or the registered model's name this reader reads."""
        return self._target

    def reset(self, checkpoint_id: Union[str, "os.PathLike[str]", None] = None) -> None:
        self._storage_data = {}
        self.load_id = uuid.uuid4().hex
        if checkpoint_id:
            self._open(os.fspath(checkpoint_id))
        else:
            self.report = LoadReport(model=self.report.model, rank=self.report.rank,
                                     world_size=self.report.world_size, device="")

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: Union[str, "os.PathLike[str]"]) -> bool:
        """A folder holding safetensors files (a registered model's name needs a daemon: pass
        a StorageReader)."""
        path = os.fspath(checkpoint_id)
        try:
            return _native.location_kind(path) == "folder" and any(
                f.endswith(".safetensors") for f in _native.list_location(path))
        except Error:  # a scheme no back end serves, an unreadable folder
            return False

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        """Every stored tensor as HuggingFaceStorageReader describes it: its safetensors name,
        torch dtype and shape, one chunk at offset 0."""
        tensors: Dict[str, Any] = {}
        storage: Dict[MetadataIndex, StoredInfo] = {}
        stored_all = self._view.stored()
        quantized = self._view.quantized if self._dequantize else {}
        # Dequantizing, the checkpoint holds the values: the scales (and MXFP4's codes, stored
        # under other names) are consumed by the values they make, no tensors of their own.
        consumed = {source for value, (codes, scales, _, _) in quantized.items()
                    for source in (codes, scales) if source != value}
        for name, stored in sorted(stored_all.items()):
            if name in consumed:
                continue
            dtype = stored.torch_dtype
            if dtype is None:
                raise BadInputError(f"{name}: dtype {stored.dtype} has no torch dtype here")
            shape = torch.Size(stored.shape)
            tensors[name] = TensorStorageMetadata(properties=TensorProperties(dtype=dtype), size=shape,
                                                  chunks=[ChunkStorageMetadata(offsets=torch.Size([0] * len(shape)),
                                                                               sizes=shape)])
            storage[MetadataIndex(fqn=name, offset=[0] * len(shape))] = StoredInfo(name, stored.file, stored.dtype,
                                                                                   tuple(shape), dtype)
        # A value stored under other names (MXFP4's `x_blocks` + `x_scales`) is read as `x`:
        # computed in float32 from its codes and scales, then held in the target's dtype.
        for name, (codes, _, value_shape, _) in sorted(quantized.items()):
            if name in tensors:
                continue
            shape = torch.Size(value_shape)
            tensors[name] = TensorStorageMetadata(properties=TensorProperties(dtype=torch.float32), size=shape,
                                                  chunks=[ChunkStorageMetadata(offsets=torch.Size([0] * len(shape)),
                                                                               sizes=shape)])
            storage[MetadataIndex(fqn=name, offset=[0] * len(shape))] = StoredInfo(
                name, stored_all[codes].file, "F32", tuple(shape), torch.float32)
        return Metadata(state_dict_metadata=tensors, storage_data=storage, storage_meta=StorageMeta(load_id=self.load_id))

    def set_up_storage_reader(self, metadata: Metadata, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        data = metadata.storage_data
        if not isinstance(data, dict) or not all(isinstance(v, StoredInfo) for v in data.values()):
            raise BadInputError("the checkpoint metadata was not made by metaload.StorageReader.read_metadata")
        self._storage_data = data

    def prepare_local_plan(self, plan: LoadPlan) -> LoadPlan:
        return plan

    def prepare_global_plan(self, plans: List[LoadPlan]) -> List[LoadPlan]:
        return plans

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future[None]:
        """Reads every item of this rank's plan in one native call, then commits each to the
        planner. With a metaload.LoadPlanner, its verification follows on every rank, also
        after a failure here (then every rank raises, naming the tensors)."""
        from .dcp_planner import LoadPlanner as MetaloadPlanner

        started = time.monotonic()
        failure: Optional[Exception] = None
        try:
            self._read(plan, planner)
        except Exception as e:  # handed to the verification: every rank learns of it
            failure = e
        self.report.seconds += time.monotonic() - started
        if isinstance(planner, MetaloadPlanner):
            planner.verify(report=self.report, failure=failure, proofs=self._proofs)
        if failure is not None:
            raise failure
        fut: Future[None] = Future()
        fut.set_result(None)
        return fut

    def _read(self, plan: LoadPlan, planner: LoadPlanner) -> None:
        self._proofs = []
        items: List[ReadItem] = []
        targets: List[torch.Tensor] = []
        requests: List[_native.Request] = []
        staged: List[Tuple[torch.Tensor, torch.Tensor]] = []
        on_meta: List[str] = []
        for item in plan.items:
            fqn = item.dest_index.fqn
            if item.type != LoadItemType.TENSOR:
                raise BadInputError(f"{fqn}: a safetensors checkpoint stores tensors only, not {item.type.name}")
            stored = self._storage_data.get(item.storage_index)
            if stored is None:
                raise BadInputError(f"{fqn}: the plan reads {item.storage_index.fqn}, which the checkpoint metadata "
                                    "does not hold")
            target = planner.resolve_tensor(item).detach()
            if list(target.shape) != list(item.lengths):
                raise BadInputError(f"{fqn}: the planner resolved a tensor of shape {list(target.shape)} for a read "
                                    f"of {list(item.lengths)}")
            if target.is_meta:
                on_meta.append(fqn)
                continue
            whole = all(o == 0 for o in item.storage_offsets) and tuple(item.lengths) == stored.shape
            # The core converts from the stored dtype (and refuses codes read as values,
            # planner/format/dtype_conversion.h): read into the target, or a contiguous copy of it.
            dest = target
            if not target.is_contiguous():
                dest = torch.empty(tuple(item.lengths), dtype=target.dtype, device=target.device)
                staged.append((target, dest))
            requests.append(_native.Request(stored.name, list(stored.shape), dest,
                                            box_start=None if whole else list(item.storage_offsets),
                                            box_length=None if whole else list(item.lengths)))
            items.append(item)
            targets.append(target)
        if on_meta:
            rank = self.report.rank
            raise MetaTensorError(
                f"dcp.load into tensors on meta (no memory to read into) on rank {rank}: "
                f"{', '.join(sorted(set(on_meta)))}: allocate the model first (model.to_empty(device=...))",
                [Finding(n, rank, "on meta: allocate it first (to_empty)") for n in sorted(set(on_meta))])
        self.report.device = str(targets[0].device) if targets else self.report.device
        progressed = progress_tracker(self._progress, self.report.rank)
        try:
            out = _native.materialize(self._view, requests, source=self._source, init_missing="error",
                                      read_threads=self._read_threads, timeout_s=self._timeout_s, check_only=False,
                                      dequantize=self._dequantize,
                                      progress=progressed.native if progressed is not None else None)
        finally:
            if progressed is not None:
                progressed.close()
        if out.refused:
            rank = self.report.rank
            raise MetaTensorError(f"dcp.load refused on rank {rank}, before anything was read:\n  " +
                                  "\n  ".join(out.summary), [Finding(f.tensor, rank, f.why) for f in out.refused])
        failed = [(item.dest_index.fqn, r.error or "not filled") for item, r in zip(items, out.results) if not r.filled]
        if failed:
            rank = self.report.rank
            raise MetaTensorError(f"dcp.load: {len(failed)} read{'s' if len(failed) != 1 else ''} failed on rank "
                                  f"{rank}:\n  " + "\n  ".join(f"{n}: {why}" for n, why in failed),
                                  [Finding(n, rank, why) for n, why in failed])
        with torch.no_grad():
            for target, dest in staged:
                target.copy_(dest)
        self._note(items, out)
        for item, target in zip(items, targets):
            planner.commit_tensor(item, target)
        # What proves each state_dict tensor now read: its reads' proofs, on the memory the
        # module's parameter shares (verify(model) sums them with every rank's).
        proofs: Dict[str, List[_native.Proof]] = {}
        for item, r in zip(items, out.results):
            proofs.setdefault(item.dest_index.fqn, []).extend(([r.proof] if r.proof is not None else []) +
                                                              list(r.more_proofs))
        state_dict = getattr(planner, "state_dict", None) or {}
        for fqn, found in proofs.items():
            self._proofs += found
            value = state_dict.get(fqn)
            if isinstance(value, torch.Tensor):
                mark_region(value, Mark.READ, "read", found)

    def _note(self, items: List[ReadItem], out: _native.MaterializeOutcome) -> None:
        """The report's record of these reads: where each tensor came from, failovers, bytes."""
        report = self.report
        for item, r in zip(items, out.results):
            fqn = item.dest_index.fqn
            if fqn not in report.provenance:
                report._note(fqn, Provenance.from_native(r.provenance))
            report._note_failovers(fqn, r.failovers)
        report._note_outcome(out)
