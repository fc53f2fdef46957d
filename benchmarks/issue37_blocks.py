"""`python -m nn.train` with the first layer's gradient all-reduced in blocks of `--block-mb` MB
(nn.mlp.FIRST_LAYER_BLOCK_BYTES), to time block sizes against each other under mpirun:

    mpirun -n 4 python benchmarks/issue37_blocks.py --block-mb 8 -- --use-tuned --hidden 4096 --batch 8192
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from nn import mlp, train  # noqa: E402

if __name__ == "__main__":
    argv = sys.argv[1:]
    if len(argv) < 3 or argv[0] != "--block-mb" or argv[2] != "--":
        sys.exit("usage: issue37_blocks.py --block-mb MB -- NN_TRAIN_ARGS...")
    mlp.FIRST_LAYER_BLOCK_BYTES = int(float(argv[1]) * (1 << 20))
    sys.exit(train.main(argv[3:]))
