"""Run a module (nn.bench, nn.profile) as `python -m`, with the cupy backend's column-major copy of
the data off: W1's tf32 update then reads X N-major, as before that copy, copying it K-major on every
call. Usage: python benchmarks/issue18_without_copy.py nn.bench --networks cme213 ..."""
import runpy
import sys

from nn.backends.storage import Storage

Storage.column_major_data = lambda self, x: False
module, sys.argv = sys.argv[1], sys.argv[1:]
runpy.run_module(module, run_name="__main__", alter_sys=True)
