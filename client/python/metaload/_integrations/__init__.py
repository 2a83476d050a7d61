"""metaload inside other loaders: transformers' from_pretrained (from_pretrained.py) and
torch.distributed.checkpoint's dcp.load (storage_reader.py: StorageReader, dcp_planner.py:
LoadPlanner), each built on metaload._core.
"""
