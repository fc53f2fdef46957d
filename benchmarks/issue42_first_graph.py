"""Issue 42: whether a process's later CUDA graphs replay slower than its first, in PyTorch alone (no
autogemm): CME 213's MLP step (784-1000-10 sigmoid, batch 800, SGD) over 68 batches captured as one
graph, timed by replays (CUDA events, median of --replays); then a second model's graph captured
and timed the same way, then the first graph timed again. With --drop, the first graph (and its
memory) is freed before the second is captured, and not timed again.

    python benchmarks/issue42_first_graph.py [--tf32] [--drop] [--replays 20]
"""
import argparse
import gc
import statistics

import torch

BATCH, STEPS = 800, 68


def epoch_graph(x: torch.Tensor, y: torch.Tensor) -> tuple:
    """A fresh MLP's epoch of SGD steps over `x`'s batches, captured after three warm-up steps: (the
    graph, the model, its optimizer), which live as long as the tuple does."""
    model = torch.nn.Sequential(torch.nn.Linear(784, 1000), torch.nn.Sigmoid(), torch.nn.Linear(1000, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, weight_decay=1e-4)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step(xb, yb):
        opt.zero_grad()
        loss_fn(model(xb), yb).backward()
        opt.step()

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step(x[:BATCH], y[:BATCH])
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for s in range(0, STEPS * BATCH, BATCH):
            step(x[s:s + BATCH], y[s:s + BATCH])
    return graph, model, opt


def replay_ms(graph: torch.cuda.CUDAGraph, replays: int) -> float:
    """The median of `replays` replays' times, after one untimed."""
    graph.replay()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tf32", action="store_true", help="TF32 GEMMs (torch.backends.cuda.matmul.allow_tf32)")
    parser.add_argument("--drop", action="store_true", help="free the first graph before capturing the second")
    parser.add_argument("--replays", type=int, default=20, help="timed replays of each graph (default: 20)")
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    torch.manual_seed(0)
    x = torch.rand(STEPS * BATCH, 784, device="cuda")                  # X: (54400, 784), never zeros
    y = torch.randint(0, 10, (STEPS * BATCH,), device="cuda")          # labels: (54400,)
    first = epoch_graph(x, y)
    print(f"first graph:            {replay_ms(first[0], args.replays):7.3f} ms", flush=True)
    if args.drop:
        del first
        gc.collect()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    second = epoch_graph(x, y)
    print(f"second graph:           {replay_ms(second[0], args.replays):7.3f} ms", flush=True)
    if not args.drop:
        print(f"first graph, once more: {replay_ms(first[0], args.replays):7.3f} ms", flush=True)


if __name__ == "__main__":
    main()
