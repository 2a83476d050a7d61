"""How a torchrun rank script that ran collectives on tensors made in Python leaves: every rank
waits for the others, destroys its process groups and exits without the interpreter's teardown.

    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # tests/integration
    from gloo_exit import leave
    ...
    leave()  # last line of the rank's main()

Why: torch's Gloo worker thread (pt_gloo_runloop) may drop its last reference to a finished work
after the caller has moved on. When that work's tensors were made in Python (DTensor's
full_tensor(), DCP's collectives, all_gather_object), freeing one needs the GIL; a thread that asks
for the GIL while the interpreter finalizes is ended by CPython, inside a C++ destructor, and that
is std::terminate: "terminate called without an active exception", SIGABRT. The core of such an
abort: pt_gloo_runloop -> ~AsyncAllgatherCoalescedWork -> TensorImpl::decref_pyobject ->
gil_scoped_acquire -> take_gil -> pthread_exit. Four ranks that full_tensor() 112 small DTensors
and then return aborted a rank in 7 of 16 runs (destroy_process_group() or not: the DeviceMesh
still holds the group). It is torch's hazard, not metaload's: metaload's own collectives run on
tensors made in C++, and the rank scripts that call only metaload (names, torchao's, from_pretrained's)
still end through the interpreter's teardown, so that path stays tested. The benchmark's ranks
(bench/e2e_fsdp.py: dcp, broadcast, the check's full tensors; bench/scale_rank.py) leave by it too:
the tests that run them (e2e_peers, objectstore, e2e_fp8, the emulated cluster) fail on a rank's
non-zero exit.
"""
import os
import sys

import torch.distributed as dist


def leave(code: int = 0) -> None:
    """Barrier (no rank closes its connections while another still gathers from it), destroy
    every group, flush what was printed, and exit with `code` without the teardown."""
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
