// Just enough of CUDA to run autogemm's kernels that use no PTX (elementwise, softmax_xent, colsum,
// linear_xent, gemm_naive) on the CPU, for tests without a GPU (tests/emulated.py).
//
// Blocks run one after another; a block's threads are OS threads. __syncthreads is a barrier of the
// block, a warp shuffle a store to the warp's slots between two barriers of the warp, atomicAdd a
// locked add. A thread that returns drops out of its barriers, as an exited CUDA thread stops
// counting for __syncthreads. __shared__ variables are static: one block at a time uses them.
#pragma once
#include <algorithm>
#include <barrier>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
#define __shared__ static

using std::exp;
using std::fma;
using std::log;
using std::max;
using std::min;

struct dim3 {
    unsigned x = 1, y = 1, z = 1;
};

namespace emu {
struct alignas(64) Chunk {   // the unit of every buffer: 16-byte vector types need their alignment
    unsigned char bytes[64];
};

struct Block {
    explicit Block(unsigned threads) : all(threads), slots(threads) {
        for (unsigned w = 0; w < (threads + 31) / 32; ++w)
            warps.push_back(std::make_unique<std::barrier<>>(std::min(32u, threads - 32 * w)));
    }
    std::barrier<> all;
    std::vector<std::unique_ptr<std::barrier<>>> warps;
    std::vector<uint64_t> slots;   // one value per thread, for shuffles
};
inline Block* block = nullptr;
inline unsigned char* dynamic_smem = nullptr;
inline std::mutex atomics;
}  // namespace emu

inline thread_local dim3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;

inline unsigned emu_thread() { return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z); }

inline void __syncthreads() { emu::block->all.arrive_and_wait(); }

template <class T>
T __shfl_xor_sync(unsigned, T v, int lane_mask, int width = 32) {
    static_assert(sizeof(T) <= sizeof(uint64_t));
    const unsigned t = emu_thread(), lane = t % 32, base = t - lane;
    const unsigned src = (lane & ~unsigned(width - 1)) | ((lane ^ lane_mask) & unsigned(width - 1));
    std::barrier<>& warp = *emu::block->warps[t / 32];
    std::memcpy(&emu::block->slots[t], &v, sizeof(T));
    warp.arrive_and_wait();
    T out;
    std::memcpy(&out, &emu::block->slots[base + src], sizeof(T));
    warp.arrive_and_wait();
    return out;
}

template <class T>
T atomicAdd(T* p, T v) {
    std::lock_guard<std::mutex> lock(emu::atomics);
    const T old = *p;
    *p = old + v;
    return old;
}

inline float __int_as_float(int x) { return std::bit_cast<float>(x); }
inline float __fdividef(float a, float b) { return a / b; }

namespace emu {
// Run kernel(args...) on a grid of blocks, each of `threads` threads, with `smem` bytes of dynamic
// shared memory.
template <class Kernel, class... Args>
void launch(Kernel kernel, dim3 grid, dim3 threads, size_t smem, Args... args) {
    gridDim = grid;
    blockDim = threads;
    const unsigned n = threads.x * threads.y * threads.z;
    std::vector<Chunk> dynamic(smem / sizeof(Chunk) + 1);
    dynamic_smem = dynamic.data()->bytes;
    for (unsigned bz = 0; bz < grid.z; ++bz)
        for (unsigned by = 0; by < grid.y; ++by)
            for (unsigned bx = 0; bx < grid.x; ++bx) {
                Block b(n);
                block = &b;
                std::vector<std::thread> pool;
                for (unsigned t = 0; t < n; ++t)
                    pool.emplace_back([&, t] {
                        threadIdx = {t % threads.x, t / threads.x % threads.y, t / (threads.x * threads.y)};
                        blockIdx = {bx, by, bz};
                        kernel(args...);
                        b.warps[t / 32]->arrive_and_drop();
                        b.all.arrive_and_drop();
                    });
                for (auto& th : pool) th.join();
            }
}
}  // namespace emu
