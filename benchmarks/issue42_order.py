"""Issue 42: whether an nn.bench row runs slower for a row timed before it in the same process: the
CME 213 MLP on each backend of --backends in turn, each by its own call of nn.bench's run() (the
data loaded again for each; 5 timed epochs), with --collect the garbage collected and PyTorch's
cached memory freed between rows.

    python benchmarks/issue42_order.py --backends A,B,... [--collect]
"""
import argparse
import gc

import torch

from nn.bench import run
from nn.networks import networks


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", required=True, help="comma list of nn.bench backends, repeats allowed")
    parser.add_argument("--collect", action="store_true", help="collect garbage and empty PyTorch's cache between rows")
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
