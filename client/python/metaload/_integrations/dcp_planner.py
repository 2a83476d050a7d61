"""metaload.LoadPlanner: DCP's DefaultLoadPlanner with materialize's strict accounting and proof.

    dcp.load(model.state_dict(), storage_reader=metaload.StorageReader(path),
             planner=metaload.LoadPlanner())
    metaload.verify(model)      # proves what dcp.load filled, against registered digests

Before anything is read, every state_dict tensor must have a source (a stored tensor of its
shape, or a tie: a key the checkpoint lacks whose tensor is the same memory as one it stores,
lm_head.weight = embed_tokens.weight) and, under ``strict``, every stored tensor a place;
else every rank raises one MetaTensorError naming them all (DefaultLoadPlanner names the first
missing key only, and ignores stored tensors nobody asked for). After the reads, on every rank,
one all-reduce proves that every element of every rank's state_dict tensors was committed by
the reader; every rank raises the same MetaTensorError naming each tensor and rank otherwise.
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.metadata import Metadata, TensorStorageMetadata
from torch.distributed.checkpoint.planner import LoadPlan, ReadItem

from .._env import rank_and_world, resolve_device
from .._errors import BadInputError, Finding, MetaTensorError
from .._core.report import LoadReport, Provenance
from .. import _native
from .._core.marks import Mark, local_tensor, mark_region, region_key, region_marked
from .._core.verify import JOIN_TIMEOUT_S, Counts, collective_group, exchange_findings


def _held_here(t: torch.Tensor) -> bool:
    """Whether this rank holds a part of `t` (a DTensor on a submesh may leave it out)."""
    mesh = getattr(t, "device_mesh", None)
    return mesh is None or mesh.get_coordinate() is not None


def _tie_hint(fqn: str, value: torch.Tensor, stored: Dict[str, Any], tensors: Dict[str, torch.Tensor]) -> str:
    """A broken tie's likely cause, when one stored tensor alone has this one's shape:
    to_empty allocates each module's parameters apart (transformers' tie_weights() ties again)."""
    alike = [k for k, md in stored.items() if isinstance(md, TensorStorageMetadata) and md.size == value.shape
             and k in tensors]
    if len(alike) != 1:
        return ""
    return (f"; it stores one tensor of its shape, {alike[0]}: tied to it, and the tie broken? (to_empty allocates "
            "tied parameters apart: call model.tie_weights() after it)")


class LoadPlanner(DefaultLoadPlanner):
    """DefaultLoadPlanner (``flatten_state_dict``, ``flatten_sharded_tensors``,
    ``allow_partial_load`` as it takes them) plus metaload's strict accounting and verification.

    ``strict`` (default True): a stored tensor the state_dict has no place for is refused
    (False: listed in ``report.unexpected``). ``allow_partial_load``: state_dict tensors the
    checkpoint lacks are left as they were (counted unproven by verification, as materialize's
    "kept"), not refused. ``verify`` (default True): after the reads, the all-reduce over
    ``process_group`` (default: the initialized group) waiting at most ``verify_timeout_s``.
    metaload.StorageReader calls ``verify`` at the end of its ``read_data``; with another
    StorageReader call ``planner.verify()`` on every rank after ``dcp.load``.
    ``report`` holds the result (the reader's LoadReport when read by metaload.StorageReader).
    """

    def __init__(self, *, strict: bool = True, allow_partial_load: bool = False, verify: bool = True,
                 process_group: Optional[dist.ProcessGroup] = None, verify_timeout_s: float = JOIN_TIMEOUT_S,
                 flatten_state_dict: bool = True, flatten_sharded_tensors: bool = True) -> None:
        super().__init__(flatten_state_dict=flatten_state_dict, flatten_sharded_tensors=flatten_sharded_tensors,
                         allow_partial_load=allow_partial_load)
        self._strict = strict
        self._verify = verify
        self._process_group = process_group
        self._verify_timeout_s = verify_timeout_s
        rank, world = rank_and_world(process_group)
        self.report = LoadReport(model="", rank=rank, world_size=world, device="")
        self._expected: Dict[str, int] = {}  # state_dict tensor -> elements this rank must receive
        self._committed: Dict[str, int] = {}
        self._kept: List[str] = []
        self._ties: Dict[str, str] = {}

    def set_up_planner(self, state_dict: Dict[str, Any], metadata: Optional[Metadata] = None,
                       is_coordinator: bool = False) -> None:
        super().set_up_planner(state_dict, metadata, is_coordinator)
        self._expected, self._committed, self._kept, self._ties = {}, {}, [], {}

    def create_local_plan(self) -> LoadPlan:
        if self.metadata is None:
            raise BadInputError("LoadPlanner.create_local_plan before set_up_planner gave it the metadata")
        # Unfilled until the reads are proven, refused loads included: verify(model) names them.
        for value in self.state_dict.values():
            if isinstance(value, torch.Tensor) and _held_here(value) and local_tensor(value).numel():
                mark_region(value, Mark.UNFILLED, "dcp.load did not fill it")
        self._account(self.metadata)
        plan = super().create_local_plan()
        for fqn, value in self.state_dict.items():
            if isinstance(value, torch.Tensor) and fqn not in self._kept and _held_here(value):
                self._expected[fqn] = local_tensor(value).numel()
        for fqn in self._kept:
            mark_region(self.state_dict[fqn], Mark.KEPT, "kept as it was: the checkpoint lacks it (allow_partial_load)")
        return plan

    def _account(self, metadata: Metadata) -> None:
        """Every state_dict tensor's source and every stored tensor's place, or MetaTensorError
        naming each that has none; ties are taken out of what the default planner plans."""
        stored = metadata.state_dict_metadata
        tensors = {k: v for k, v in self.state_dict.items() if isinstance(v, torch.Tensor)}
        by_memory: Dict[Any, str] = {}
        for fqn, value in tensors.items():
            if fqn in stored:
                by_memory.setdefault(region_key(value), fqn)
        bad: List[Tuple[str, str]] = []
        for fqn, value in tensors.items():
            source = by_memory.get(region_key(value))
            if source is None or source == fqn:
                continue
            if fqn in stored:
                bad.append((fqn, f"the same tensor as {source} in the state_dict, but the checkpoint stores both, with "
                                 "values of their own: build the model untied (tie_word_embeddings=False)"))
            else:
                self._ties[fqn] = source
        for fqn, value in tensors.items():
            if fqn in self._ties:
                continue
            md = stored.get(fqn)
            if md is None:
                if self.allow_partial_load:
                    self._kept.append(fqn)
                else:
                    bad.append((fqn, "the checkpoint has no such tensor" + _tie_hint(fqn, value, stored, tensors) +
                                " (allow_partial_load=True keeps it as it is)"))
            elif isinstance(md, TensorStorageMetadata) and md.size != value.shape:
                bad.append((fqn, f"the checkpoint stores it as {list(md.size)} "
                                 f"{str(md.properties.dtype).replace('torch.', '')}, the state_dict holds "
                                 f"{list(value.shape)}: another size of this model?"))
        unexpected = sorted(k for k in stored if k not in self.state_dict)
        if self._strict:
            bad += [(k, "stored in the checkpoint, and the state_dict has no place for it (strict=False loads the "
                        "rest and lists it in report.unexpected)") for k in unexpected]
        else:
            self.report.unexpected = unexpected
        if bad:
            rank = self.report.rank
            raise MetaTensorError(
                f"dcp.load refused on rank {rank}, before anything was read: {len(bad)} tensor"
                f"{'s' if len(bad) != 1 else ''} without a source or a place:\n" +
                "\n".join(f"  {fqn}: {why}" for fqn, why in bad), [Finding(fqn, rank, why) for fqn, why in bad])
        for alias in self._ties:
            del self.state_dict[alias]

    def commit_tensor(self, read_item: ReadItem, tensor: torch.Tensor) -> None:
        fqn = read_item.dest_index.fqn
        self._committed[fqn] = self._committed.get(fqn, 0) + math.prod(read_item.lengths)

    def verify(self, *, report: Optional[LoadReport] = None, failure: Optional[BaseException] = None,
               proofs: Sequence[_native.Proof] = ()) -> int:
        """After the reads, on every rank: proves across ranks that every element of every
        state_dict tensor was committed. Returns the tensors verified across all ranks, or raises
        MetaTensorError on every rank naming each tensor left unfilled and its rank (``failure``:
        this rank's read failed with it; its text is each of its tensors' reason), or whose bytes
        differ from its registered digest (``proofs``: what metaload.StorageReader's reads
        prove, summed with every rank's: ``report.proven`` says whether every tensor's content
        is proven)."""
        if report is not None:
            report.unexpected = self.report.unexpected or report.unexpected
            self.report = report
        for alias, source in self._ties.items():
            self.report._note(alias, Provenance("tied", tied_to=source), f"tied:{source}")
        # A failed read names its own tensors (MetaTensorError.findings); the others of this
        # rank were not committed either: a rank's reads are committed all together or not at all.
        own = {f.tensor: f.why for f in getattr(failure, "findings", [])}
        headline = str(failure).splitlines()[0] if failure is not None else ""
        bad = [(fqn, own.get(fqn) or f"{self._committed.get(fqn, 0)} of {n} elements filled by dcp.load" +
                (f" ({headline})" if failure is not None else ""))
               for fqn, n in self._expected.items() if self._committed.get(fqn, 0) != n]
        summary: List[str] = []
        if failure is not None:
            if not bad:
                bad = [("(read_data)", f"{type(failure).__name__}: {failure}")]
            summary = [f"{fqn}: {why}" for fqn, why in bad if fqn in own or fqn == "(read_data)"]
            if len(summary) < len(bad):
                summary.append(f"{len(bad) - len(summary)} more tensors of this rank not filled: its reads are "
                               f"committed together or not at all ({headline})")
        if not self._verify:  # this rank's own accounting only; a failure is the reader's to raise
            self._settle()
            if bad and failure is None:
                rank = self.report.rank
                raise MetaTensorError(f"dcp.load left {len(bad)} tensors unfilled on rank {rank}:\n" +
                                      "\n".join(f"  {fqn}: {why}" for fqn, why in bad),
                                      [Finding(fqn, rank, why) for fqn, why in bad])
            return 0
        # Read by another StorageReader: filled, but nothing proves what with.
        unread = 0 if proofs else sum(1 for fqn, n in self._expected.items() if n and self._committed.get(fqn, 0) == n)
        counts = Counts(len(self._expected) + len(self._kept) + len(self._ties), len(self._kept) + unread)
        device = resolve_device(None, self.report.rank)
        with collective_group(self._process_group, device, self._verify_timeout_s) as group:
            total = exchange_findings(bad, counts, group, summary, timeout_s=self._verify_timeout_s, proofs=proofs)
        self._settle()
        self.report._note_verified(total)
        return self.report.verified_tensors or 0

    def _settle(self) -> None:
        """The tensors filled whole keep the reader's mark (metaload.StorageReader's: read, with
        the proofs of its reads); filled by another reader, they are marked kept (nothing proves
        their content), no longer unfilled."""
        for fqn, n in self._expected.items():
            if not n or self._committed.get(fqn, 0) != n:
                continue
            mark = region_marked(self.state_dict[fqn])
            if mark is not None and mark[0] is Mark.UNFILLED:
                mark_region(self.state_dict[fqn], Mark.KEPT, "filled by a StorageReader that proves nothing of it")
