"""metaload's core in Python: what a rank loads, how it is filled, and the proof.

materialize.py (the public materialize() flow) over entries.py (the module's tensors and their
requests), hf_names.py (checkpoint names as transformers maps them), layout.py (a DTensor's
boxes), strict.py (the accounting before anything is allocated), fill.py (allocation and the
native reads), fanout.py (the replica groups that read once), ties.py; load.py (load(): metactl
load in process); verify.py (verify(): the proof on every rank); report.py (LoadReport, and the
_note* methods every loader records with); progress.py (LoadProgress, the bar, and the records of
one load's native calls summed). Nothing here imports metaload._integrations.
"""
