"""metaload: fill a meta-built PyTorch model with only this rank's shards, and prove it.

    import metaload
    report = metaload.materialize(model, "llama-8b")   # model built on meta, maybe FSDP2/TP
    tensors = metaload.load("llama-8b", strategy="tp", tp=2)
    metaload.verify(model)                             # any module, however it was loaded
    model = metaload.from_pretrained("/models/qwen2", distributed_config=DistributedConfig(tp_size=2))
    dcp.load(model.state_dict(), storage_reader=metaload.StorageReader("/models/llama-8b"),
             planner=metaload.LoadPlanner())          # torch.distributed.checkpoint, verified

Defaults follow torchrun: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/MASTER_PORT; the daemon
from METAD_ADDRESS; TLS files and the token from METALOAD_TLS_CA/CERT/KEY and
METALOAD_TOKEN_FILE, or metaload.set_credentials(...). See help(metaload.materialize),
help(metaload.load), help(metaload.verify), help(metaload.set_credentials),
help(metaload.StorageReader), help(metaload.LoadPlanner), help(metaload.LoadProgress).
"""
# The namespace holds the API only (__all__, docs/python.md "Public names"): every other name
# imported here is a private alias.
import pathlib as _pathlib

from ._torch_check import check_torch_version as _check_torch_version

# Before torch and the extension: another torch than the recorded one is refused by name.
_check_torch_version(_pathlib.Path(__file__).parent)

import torch as _torch  # noqa: F401 (first of the rest: the extension uses this process's LibTorch)

from ._core.load import LoadedTensors, load
from ._core.materialize import materialize
from ._core.progress import LoadProgress
from ._core.report import LoadReport, Provenance
from ._core.verify import Verification, verify
from ._credentials import set_credentials
from ._errors import BadInputError, BusyError, Error, Finding, LoadError, MetaTensorError
from ._integrations.dcp_planner import LoadPlanner
from ._integrations.from_pretrained import from_pretrained
from ._integrations.storage_reader import StorageReader

__version__ = "0.1.0"
__all__ = ["BadInputError", "BusyError", "Error", "Finding", "LoadError", "LoadPlanner", "LoadProgress", "LoadReport",
           "LoadedTensors", "MetaTensorError", "Provenance", "StorageReader", "Verification", "from_pretrained", "load",
           "materialize", "set_credentials", "verify", "__version__"]
