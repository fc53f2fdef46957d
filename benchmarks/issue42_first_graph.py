"""Issue 42: whether a process's later CUDA graphs replay slower than its first, in PyTorch alone
(no autogemm): CME 213's MLP step (784-1000-10 sigmoid, batch 800, SGD) over 68 batches captured
as one graph, timed by replays (CUDA events, median of --replays); then a second model's graph
captured and timed the same way, then the first graph timed again. With --drop, the first graph
(and its memory) is freed before the second is captured, and not timed again. With --rounds N,
the first graph is timed N times (--pause seconds apart) before the second is captured: a slowdown
that follows the clock, not the capture, shows there. With --between, something else happens
where the second graph would be captured, and the first graph is timed again: a graph of one
small kernel (kept or freed), a fresh model's epoch run eagerly (or one step of it, or its forward
passes alone), the first model's epoch run eagerly, one matrix product, or 2 GiB allocated and
written, on the stream --stream names (the current one, a new one, or the first graph's warm-up
stream). With --warm-twice, each graph's warm-up runs on the current stream as well as its side
stream.

    python benchmarks/issue42_first_graph.py [--tf32] [--drop] [--replays 20] [--rounds 1] [--pause 0]
        [--between {graph,tiny-graph,tiny-graph-freed,eager,eager-step,eager-forward,eager-same,mm,alloc}]
        [--stream {current,new,warmup}] [--warm-twice]
"""
import argparse
import datetime
import gc
import statistics
import time

import torch

BATCH, STEPS = 800, 68


def epoch_graph(x: torch.Tensor, y: torch.Tensor, warm_on_current: bool = False) -> tuple:
    """A fresh MLP's epoch of SGD steps over `x`'s batches, captured after three warm-up steps on a
    side stream (after three on the current stream too with `warm_on_current`): (the graph, the
    model, its optimizer, the warm-up's stream), which live as long as the tuple does."""
    model = torch.nn.Sequential(torch.nn.Linear(784, 1000), torch.nn.Sigmoid(), torch.nn.Linear(1000, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, weight_decay=1e-4)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step(xb, yb):
        opt.zero_grad()
        loss_fn(model(xb), yb).backward()
        opt.step()

    if warm_on_current:
        for _ in range(3):
            step(x[:BATCH], y[:BATCH])
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
    return graph, model, opt, side


def eager_steps(x: torch.Tensor, y: torch.Tensor, model=None, steps: int = STEPS, backward: bool = True) -> None:
    """`steps` SGD steps of `model` (a fresh MLP by default) run eagerly, nothing captured; forward
    passes alone with backward=False."""
    model = model or torch.nn.Sequential(torch.nn.Linear(784, 1000), torch.nn.Sigmoid(),
                                         torch.nn.Linear(1000, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, weight_decay=1e-4)
    with torch.set_grad_enabled(backward):
        for s in range(0, steps * BATCH, BATCH):
            loss = torch.nn.functional.cross_entropy(model(x[s:s + BATCH]), y[s:s + BATCH])
            if backward:
                opt.zero_grad()
                loss.backward()
                opt.step()
    torch.cuda.synchronize()


def tiny_graph() -> tuple:
    """A graph of one small kernel: (the graph, the tensor it writes)."""
    t = torch.ones(1024, device="cuda")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        t.add_(1.0)
    graph.replay()
    return graph, t


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


def now() -> str:
    """The wall clock to the millisecond, to line a round up with nvidia-smi's log."""
    return datetime.datetime.now().strftime("%H:%M:%S.%f")[:-3]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tf32", action="store_true", help="TF32 GEMMs (torch.backends.cuda.matmul.allow_tf32)")
    parser.add_argument("--drop", action="store_true", help="free the first graph before capturing the second")
    parser.add_argument("--replays", type=int, default=20, help="timed replays of each graph (default: 20)")
    parser.add_argument("--rounds", type=int, default=1, help="times the first graph is timed (default: 1)")
    parser.add_argument("--pause", type=float, default=0.0, help="seconds between those rounds (default: 0)")
    parser.add_argument("--between", default="graph",
                        choices=("graph", "tiny-graph", "tiny-graph-freed", "eager", "eager-step",
                                 "eager-forward", "eager-same", "mm", "alloc"),
                        help="what happens after the first graph's rounds (default: a second epoch graph)")
    parser.add_argument("--stream", default="current", choices=("current", "new", "warmup"),
                        help="where --between's work runs: the current stream, a new one, or the first "
                             "graph's warm-up stream (default: current)")
    parser.add_argument("--warm-twice", action="store_true",
                        help="warm each graph up on the current stream as well as its side stream")
    args = parser.parse_args()
    if args.between == "graph" and args.stream != "current":
        parser.error("--stream places --between's work; the second graph warms up on a side stream of its own")
    if args.drop and args.between != "graph":
        parser.error("--drop frees the first graph before a second is captured: it goes with --between graph")
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    torch.manual_seed(0)
    x = torch.rand(STEPS * BATCH, 784, device="cuda")                  # X: (54400, 784), never zeros
    y = torch.randint(0, 10, (STEPS * BATCH,), device="cuda")          # labels: (54400,)
    first = epoch_graph(x, y, args.warm_twice)
    for round_ in range(args.rounds):
        if round_:
            time.sleep(args.pause)
        print(f"first graph:            {replay_ms(first[0], args.replays):7.3f} ms  at {now()}", flush=True)
    if args.between != "graph":
        stream = {"current": torch.cuda.current_stream(), "new": torch.cuda.Stream(),
                  "warmup": first[3]}[args.stream]
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):   # `kept`: what the work made lives while the first graph is timed
            kept = {"tiny-graph": tiny_graph, "tiny-graph-freed": lambda: tiny_graph() and None,
                    "eager": lambda: eager_steps(x, y), "eager-step": lambda: eager_steps(x, y, steps=1),
                    "eager-forward": lambda: eager_steps(x, y, backward=False),
                    "eager-same": lambda: eager_steps(x, y, model=first[1]),
                    "mm": lambda: x[:BATCH] @ torch.rand(784, 1000, device="cuda"),
                    "alloc": lambda: torch.empty(2**29, device="cuda").fill_(1.0)}[args.between]()  # noqa: F841
        torch.cuda.synchronize()
        print(f"first graph, after {args.between}: {replay_ms(first[0], args.replays):7.3f} ms  at {now()}",
              flush=True)
        return
    if args.drop:
        del first
        gc.collect()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    second = epoch_graph(x, y, args.warm_twice)
    print(f"second graph:           {replay_ms(second[0], args.replays):7.3f} ms  at {now()}", flush=True)
    if not args.drop:
        print(f"first graph, once more: {replay_ms(first[0], args.replays):7.3f} ms  at {now()}", flush=True)


if __name__ == "__main__":
    main()
