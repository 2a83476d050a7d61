"""Types of the extension metaload._native (native/module.cc): the C++ client library.

What identifies the thing is positional; every option is keyword-only and has no default here:
the package (metaload/**/*.py) decides them. Records are the library's own structs, read-only.
Failures raise metaload's exceptions (BadInputError, MetaTensorError, LoadError); Ctrl-C during a
call cancels it and raises KeyboardInterrupt.
"""
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

class StoredTensor:
    """A tensor the checkpoint stores (planner/format/tensor_layout.h)."""

    @property
    def dtype(self) -> str: ...  # the safetensors code: "BF16"
    @property
    def shape(self) -> List[int]: ...
    @property
    def file(self) -> str: ...  # relative to the checkpoint folder
    @property
    def torch_dtype(self) -> Optional[torch.dtype]: ...  # the C++ core's table; None: torch has none

class ModelView:
    """An opened model (client/resolve/model_view.h)."""

    @property
    def model(self) -> str: ...
    @property
    def origin(self) -> str: ...  # "daemon 127.0.0.1:7070" / "checkpoint /m/x"
    @property
    def answered_by(self) -> str: ...
    @property
    def init_missing(self) -> str: ...  # the policy the model was registered with
    @property
    def hf_config_json(self) -> str: ...  # a daemon's: the config.json registered; "" otherwise
    @property
    def digest_note(self) -> str: ...  # why a folder's metaload.digests.json was not used; "" otherwise
    @property
    def quantization(self) -> Optional[Tuple[str, str, str]]: ...  # (method, description, capability)
    @property
    def quantized(self) -> Dict[str, Tuple[str, str, List[int], str]]: ...  # value -> (codes, scales, shape, rule)
    @property
    def proof_required(self) -> bool: ...  # the daemon requires proof of content (require_digests)
    @property
    def tied_to(self) -> Dict[str, str]: ...  # alias -> its stored name
    @property
    def buffer_rules(self) -> Dict[str, str]: ...  # non-persistent buffer -> its rule
    def stored(self) -> Dict[str, StoredTensor]: ...

class Request:
    """One tensor, or the box of it this rank holds, to fill (client/resolve/resolver.h)."""

    def __init__(self, name: str, full_shape: Sequence[int], dest: torch.Tensor, *,
                 box_start: Optional[Sequence[int]] = None, box_length: Optional[Sequence[int]] = None,
                 is_buffer: bool = False, scale_block: Sequence[int] = ()) -> None: ...
    @property
    def name(self) -> str: ...
    @property
    def full_shape(self) -> List[int]: ...
    @property
    def box_start(self) -> Optional[List[int]]: ...
    @property
    def box_length(self) -> Optional[List[int]]: ...
    @property
    def is_buffer(self) -> bool: ...
    @property
    def scale_block(self) -> List[int]: ...  # kept codes: the module's elements per scale; []: none declared
    @property
    def dest(self) -> torch.Tensor: ...

class Provenance:
    """Where a tensor's values came from, as fields (client/read/provenance.h)."""

    @property
    def kind(self) -> str: ...  # "none", "direct", "stream", "init", "buffer", "tied", "module"
    @property
    def nodes(self) -> List[str]: ...
    @property
    def converted_to(self) -> Optional[str]: ...
    @property
    def rule(self) -> str: ...
    @property
    def tied_to(self) -> str: ...

class Failover:
    """One switch of source while streaming."""

    @property
    def source(self) -> str: ...  # the node that failed, or "direct"
    @property
    def target(self) -> str: ...
    @property
    def at_byte(self) -> int: ...
    @property
    def error(self) -> str: ...

class TensorResult:
    @property
    def filled(self) -> bool: ...
    @property
    def provenance(self) -> Provenance: ...
    @property
    def error(self) -> str: ...
    @property
    def failovers(self) -> List[Failover]: ...
    @property
    def more_proofs(self) -> List[Proof]: ...  # a dequantized value's scales
    @property
    def proof(self) -> Optional[Proof]: ...  # a read's: what its bytes prove; None otherwise

class Proof:
    """What a rank's bytes of one stored tensor prove (client/verify/tensor_proof.h): handed back
    to exchange_reports, which sums every rank's against the registered digest."""

    @property
    def stored(self) -> str: ...
    @property
    def index(self) -> int: ...
    @property
    def tile_count(self) -> int: ...
    @property
    def digest(self) -> str: ...  # "fast", "strong" or "none"
    @property
    def tiles_hashed(self) -> int: ...
    @property
    def tiles_cut(self) -> int: ...

class Finding:
    """A tensor that would stay on meta, and why."""

    @property
    def tensor(self) -> str: ...
    @property
    def why(self) -> str: ...

class Progress:  # include/metaload/progress.h: one rank's load so far
    @property
    def direct_bytes(self) -> int: ...
    @property
    def streamed_bytes(self) -> int: ...
    @property
    def received_bytes(self) -> int: ...
    @property
    def total_bytes(self) -> int: ...
    @property
    def tensors_done(self) -> int: ...
    @property
    def tensors_total(self) -> int: ...
    @property
    def seconds(self) -> float: ...
    @property
    def finished(self) -> bool: ...
class MaterializeOutcome:
    @property
    def refused(self) -> List[Finding]: ...  # non-empty: nothing was read
    @property
    def summary(self) -> List[str]: ...  # the refusals grouped for people
    @property
    def results(self) -> List[TensorResult]: ...  # one per request, in order
    @property
    def direct_bytes(self) -> int: ...
    @property
    def streamed_bytes(self) -> int: ...
    @property
    def fanout_received_bytes(self) -> int: ...  # fan_out=: bytes other ranks sent here
    @property
    def fanout_sent_bytes(self) -> int: ...  # fan_out=: bytes this rank sent, per receiver
    @property
    def fanout_notes(self) -> List[str]: ...

class LoadedTensor:
    @property
    def name(self) -> str: ...
    @property
    def tensor(self) -> torch.Tensor: ...
    @property
    def box_start(self) -> Optional[List[int]]: ...  # None: the whole tensor
    @property
    def box_length(self) -> Optional[List[int]]: ...
    @property
    def full_shape(self) -> List[int]: ...
    @property
    def result(self) -> TensorResult: ...  # filled, where from, why not, failovers

class RankLoad:
    """What one rank loaded (client/load/rank_loader.h)."""

    @property
    def tensors(self) -> List[LoadedTensor]: ...
    @property
    def rank(self) -> int: ...
    @property
    def world_size(self) -> int: ...
    @property
    def node(self) -> str: ...
    @property
    def answered_by(self) -> str: ...
    @property
    def device(self) -> str: ...
    @property
    def plan_digest(self) -> str: ...
    @property
    def proof_required(self) -> bool: ...  # the coordinator requires proof of content (require_digests)
    @property
    def plan_label(self) -> str: ...
    @property
    def failures(self) -> List[str]: ...
    @property
    def direct_bytes(self) -> int: ...
    @property
    def streamed_bytes(self) -> int: ...
    # Read-only, as every attribute here; what fan-out moved and what went wrong on the way.
    fanout_received_bytes: int
    fanout_sent_bytes: int
    fanout_notes: List[str]
    @property
    def seconds(self) -> float: ...
    @property
    def has_digests(self) -> bool: ...  # its plan carries registered digests

def open_model(model: str, *, daemon: str, checkpoint: str, timeout_s: float) -> ModelView: ...
# fan_out: the replica groups holding each request alike (metaload/_core/fanout.py spec), or None.
def materialize(view: ModelView, requests: Sequence[Request], *, source: str, init_missing: Optional[str],
                read_threads: int, timeout_s: float, check_only: bool,
                fan_out: Optional[Dict[str, Any]] = None, dequantize: bool = False,
                progress: Optional[Callable[[Progress], None]] = None) -> MaterializeOutcome: ...
def load_rank(model: str, *, daemon: str, rank: int, world_size: int, device: str, source: str, strategy: str,
              tp: int, pp: int, dtype: Optional[str], init_missing: Optional[str], read_threads: int,
              timeout_s: float, group: Optional[Any] = None, fanout_key: str = "",
              dequantize: bool = False, progress: Optional[Callable[[Progress], None]] = None) -> RankLoad: ...
def resolve_device(text: str, *, rank: int) -> str: ...
def format_bytes(size_bytes: int) -> str: ...  # "1.50 GiB", as metactl prints sizes
# The init budget (planner/doctor/init_budget.h), as `metactl register` applies it: None when a
# policy may initialize `initialized` of the module's `total` tensors, else the refusal.
# catch_all: one policy string (`policy`) for whatever is missing; example: a tensor it fills.
def init_budget_refusal(initialized: int, total: int, *, catch_all: bool, policy: str,
                        example: str) -> Optional[str]: ...
# Verification (client/verify/exchange.h) over `group` (a torch ProcessGroup; None: one process
# alone): every rank's findings, counts and plan digest, the same answer on every rank. Keys:
# ok, message, findings [(tensor, rank, why)], checked, unproven, rank, world_size.
DEFAULT_VERIFY_TIMEOUT_S: float
def exchange_reports(group: Optional[Any], *, device: str, findings: Sequence[Tuple[str, str]],
                     summary: Sequence[str], checked: int, unproven: int, could_not_load: bool,
                     plan_digest: str, refusal: bool, timeout_s: float, proofs: Sequence[Proof] = ...,
                     initialized: int = ..., computed: int = ...) -> Dict[str, Any]: ...
# Every rank's `values` summed element-wise over `group` (None: returned as they are), on tensors
# of the core's (none with a Python object). `what` names the collective in errors; at most 2^20
# values, each within +/-2^42 (InvalidArgument on every rank otherwise: the sum stays exact); every
# rank must pass as many (FailedPrecondition on every rank otherwise).
def sum_int64(group: Optional[Any], *, device: str, values: Sequence[int], what: str,
              timeout_s: float) -> List[int]: ...
# The bound every wait is held to (client/read/knobs.h): BadInputError naming `name` outside it.
def check_timeout(name: str, seconds: float) -> None: ...
def set_credentials(*, tls_ca: str, tls_cert: str, tls_key: str, token_file: str) -> None: ...
# The storage seam (util/fs/storage.h): "file", "folder", "missing" or "other"; a folder's names;
# the text of its config.json (planner/skeleton/hf/hf_config.h's rule).
def location_kind(location: str) -> str: ...
def list_location(location: str) -> List[str]: ...
def read_small_file(location: str, what: str) -> str: ...
def normal_location(location: str) -> str: ...
def location_scheme(location: str) -> str: ...
def location_name(location: str) -> str: ...
def join_location(dir: str, name: str) -> str: ...
def read_config_json(folder: str) -> str: ...
# Tests only: a file of the in-memory back end ("mem://"), registered on first use.
def _test_memory_put(location: str, data: bytes) -> None: ...
