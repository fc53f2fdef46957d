"""Issue 42: whether an nn.bench row runs slower for a row timed before it in the same process: each
row of --backends timed in turn (as nn.bench does), with --collect the garbage collected and
PyTorch's cached memory freed between rows.

    python benchmarks/issue42_order.py --backends A,B,... [--collect]
"""
import argparse
import gc

import torch

from nn.bench import run
from nn.networks import networks


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", required=True)
    parser.add_argument("--collect", action="store_true")
    args = parser.parse_args()
    for backend in args.backends.split(","):
        result = run([networks()["cme213"]], [backend], epochs=5)[0]
        print(f"{backend:36s} {result.ms_per_epoch:6.2f} ms/epoch", flush=True)
        if args.collect:
            gc.collect()
            torch.cuda.synchronize()
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
