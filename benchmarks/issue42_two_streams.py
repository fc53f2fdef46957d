"""Issue 42: how far the two-stream slowdown reaches, in CuPy alone (no PyTorch). PyTorch's graphs
replay about 0.3 µs a kernel slower once their kernels have run eagerly on a second stream
(benchmarks/issue42-h200, streams/). Three graphs of 2,000 launches each, of kernels A and C (one
module) and B (another), all warmed up and captured on one stream, are timed; then A runs once on a
second stream, and the three are timed again; then B does, and again.

    python benchmarks/issue42_two_streams.py [--launches 2000] [--blocks 1] [--replays 20]
"""
import argparse
import statistics

import cupy

SOURCE = r"""
extern "C" __global__ void NAME_a(float* y) { int i = blockIdx.x * 256 + threadIdx.x; y[i] = y[i] * 0.999f + 1.0f; }
extern "C" __global__ void NAME_c(float* y) { int i = blockIdx.x * 256 + threadIdx.x; y[i] = y[i] * 0.998f + 2.0f; }
"""


def graph_of(kernel, y, launches: int, stream):
    """A CUDA graph of `launches` launches of `kernel` on `y` (a thread an element, 256 a block)."""
    with stream:
        stream.begin_capture()
        for _ in range(launches):
            kernel((y.size // 256,), (256,), (y,))
        return stream.end_capture()


def replay_us(graph, stream, launches: int, replays: int) -> float:
    """The median replay's time over `replays` replays, in µs a launch."""
    graph.launch(stream)
    times = []
    for _ in range(replays):
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record(stream)
        graph.launch(stream)
        end.record(stream)
        end.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, end) * 1e3 / launches)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launches", type=int, default=2000, help="launches in each graph (default: 2000)")
    parser.add_argument("--blocks", type=int, default=1, help="blocks of 256 threads a launch (default: 1)")
    parser.add_argument("--replays", type=int, default=20, help="timed replays of each graph (default: 20)")
    args = parser.parse_args()
    first, second = cupy.RawModule(code=SOURCE.replace("NAME", "first")), \
        cupy.RawModule(code=SOURCE.replace("NAME", "second"))
    kernels = {"A": first.get_function("first_a"), "C": first.get_function("first_c"),
               "B": second.get_function("second_a")}
    main_stream, other = cupy.cuda.Stream(non_blocking=True), cupy.cuda.Stream(non_blocking=True)
    y = cupy.random.rand(256 * args.blocks, dtype=cupy.float32)    # y: (256 * blocks,), never zeros
    cupy.cuda.Device().synchronize()                               # filled on the null stream
    with main_stream:
        for kernel in kernels.values():
            kernel((args.blocks,), (256,), (y,))
    graphs = {name: graph_of(kernel, y, args.launches, main_stream) for name, kernel in kernels.items()}

    def row(label):
        times = "  ".join(f"{name} {replay_us(g, main_stream, args.launches, args.replays):6.3f}"
                          for name, g in graphs.items())
        print(f"{label:<28} µs a launch: {times}", flush=True)

    row("all on one stream")
    with other:
        kernels["A"]((args.blocks,), (256,), (y,))
    other.synchronize()
    row("after A on a second stream")
    with other:
        kernels["B"]((args.blocks,), (256,), (y,))
    other.synchronize()
    row("after B on a second stream")


if __name__ == "__main__":
    main()
