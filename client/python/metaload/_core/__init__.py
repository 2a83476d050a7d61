"""metaload's core in Python: what a rank loads (materialize.py, load.py), and the proof (verify.py)."""
