// Just enough of CUDA to run every autogemm kernel on the CPU, for tests without a GPU
// (autogemm/testing/emulator.py, which also turns each inline PTX statement into a call of emu::ptx).
//
// Blocks run one cluster after another, a cluster's blocks (1 without __cluster_dims__) together;
// their threads are fibers of one OS thread, each running until it waits on something not yet
// there and then handing over to the next (round robin): a wait costs a switch, not a system call,
// and a round in which every thread waits and none arrives anywhere is reported as a deadlock.
// __syncthreads is a barrier of the block, a warp shuffle a store to the warp's slots between two
// barriers of the warp. A thread that returns drops out of its barriers, as an exited CUDA thread
// stops counting for __syncthreads.
// __shared__ variables are static: the blocks of one cluster share them (no clustered kernel has any).
//
// The PTX the GEMM uses: cp.async copies are queued per thread and done at the wait_group that
// requires them (the latest a GPU may land them, so a missing wait reads stale shared memory); the
// warp's mma.sync m16n8k8 gathers the 32 lanes' fragments in the warp's slots, like a shuffle, and
// sums the products of their TF32 values (the top 19 bits) in double (m16n8k16 its bfloat16 pairs'
// alike). A warpgroup's wgmma reads
// its operands (TF32 or bfloat16) from shared memory through their descriptors (start, stride of
// 8-row atoms, the 128- or 64-byte swizzle; for transposed bfloat16, 64-row blocks of 128-byte k
// rows) as it is issued, or A from registers, gathered from the warp's lanes as mma.sync's
// fragments are, each thread summing its own accumulators of the 64 x N tile:
// it checks the kernel's shared layout against the descriptor's meaning, not the hardware's timing
// (the kernels wait for each group before touching its memory). mbarriers count arrivals per
// phase, and a thread waiting on one yields until the phase completes; cp.async.mbarrier.arrive
// lands the thread's copies, then arrives; bar.sync's named barriers are barriers of their count.
// A bulk tensor copy (TMA) reads a tensor map that the emulator encodes (TensorMapArgument: what
// cuTensorMapEncodeTiled is given) and is queued on its mbarrier, whose phase also waits for the
// bytes expected of it; the copies land, swizzled, when a thread waits on that mbarrier (the latest
// a GPU may land them: a read before the wait finds stale data), or with
// EMU_BULK_COPIES_LAND_AT_ISSUE when issued (the earliest: a slot refilled while still read is
// overwritten under its reader). In a cluster, mapa gives another block's shared address (its rank
// above bit 24), on which mbarriers arrive; a multicast bulk copy is queued on each destination
// block's mbarrier and lands in that block's shared memory; barrier.cluster is a barrier of every
// thread of the cluster.
#pragma once
#include <ucontext.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
#define __shared__ static
#define __grid_constant__
#define __cluster_dims__(...)

using std::exp;
using std::fma;
using std::log;
using std::max;
using std::min;

struct dim3 {
    unsigned x = 1, y = 1, z = 1;
};
struct int2 {
    int x, y;
};
inline int2 make_int2(int x, int y) { return {x, y}; }
struct alignas(8) float2 {
    float x, y;
};
struct alignas(16) double2 {
    double x, y;
};

namespace emu {
// ---- a block's threads as fibers -----------------------------------------------------------------
inline unsigned long long progress = 0;   // arrivals, landed copies and returns so far
inline ucontext_t scheduler;              // the launch's own context, which picks the next thread
struct Fiber;
inline Fiber* current = nullptr;          // the thread running now

// Hand over to the next thread; this one runs again on the scheduler's next round.
inline void yield();

// Until `ready()` holds, let the other threads run.
template <class Ready>
void wait_until(Ready ready) {
    while (!ready()) yield();
}

// A barrier of `count` threads, as std::barrier: arrive (its token: the phase), wait for a token's
// phase to pass, or drop out (an arrival now, one fewer expected from the next phase on).
struct Barrier {
    explicit Barrier(unsigned count) : expected(count) {}
    unsigned arrive() {
        ++progress;
        const unsigned token = phase;
        if (++arrived >= expected) complete();
        return token;
    }
    void wait(unsigned token) const {
        wait_until([&] { return phase != token; });
    }
    void arrive_and_wait() { wait(arrive()); }
    void arrive_and_drop() {
        ++progress;
        if (--expected <= arrived && arrived) complete();
    }

private:
    void complete() {
        arrived = 0;
        ++phase;
    }
    unsigned expected, arrived = 0, phase = 0;
};

struct alignas(64) Chunk {   // the unit of every buffer: 16-byte vector types need their alignment
    unsigned char bytes[64];
};

struct Block {
    Block(unsigned threads, size_t smem_bytes) : all(threads), slots(threads), fragments(threads), dynamic(smem_bytes / sizeof(Chunk) + 1) {
        smem = dynamic.data()->bytes;
        for (unsigned w = 0; w < (threads + 31) / 32; ++w)
            warps.push_back(std::make_unique<Barrier>(std::min(32u, threads - 32 * w)));
    }
    Barrier all;
    std::vector<std::unique_ptr<Barrier>> warps;
    std::vector<Chunk> dynamic;                          // its dynamic shared memory
    unsigned char* smem;
    std::vector<uint64_t> slots;                         // one value per thread, for shuffles
    std::vector<std::array<uint32_t, 6>> fragments;      // a0-a3, b0-b1 per thread, for mma.sync
    struct BulkCopy {                                    // a queued bulk tensor copy
        unsigned char* smem;                             // the destination block's shared memory
        unsigned dst;
        std::array<unsigned char, 128> map;
        int c0, c1;
    };
    struct Mbarrier {
        unsigned count, pending, phase;                  // arrivals a phase, those still due, phases done
        long long tx = 0;                                // bytes expected of copies and not yet landed
        std::vector<BulkCopy> queued;
    };
    std::map<unsigned, Mbarrier> mbarriers;              // by shared address
    std::map<unsigned, std::unique_ptr<Barrier>> named;  // bar.sync's barriers 1-15, by id
};

struct Cluster {
    Cluster(unsigned blocks, unsigned threads) : all(blocks * threads) {}
    std::vector<Block*> blocks;                          // by rank
    Barrier all;                                         // barrier.cluster
};

// A 2-D tiled tensor map as the emulator encodes it in a kernel's 128 opaque bytes: the array, its
// element size, its (row length, rows) and row pitch, the box (inner, outer) and the swizzle bytes.
struct TensorMapFields {
    const unsigned char* base;
    uint64_t inner, outer, row_bytes;
    uint32_t elem, box_inner, box_outer, swizzle;
};
static_assert(sizeof(TensorMapFields) <= 128);
// The argument that passes a map by value: converts to the kernel's 128-byte parameter type.
struct TensorMapArgument {
    TensorMapFields fields;
    TensorMapArgument(const void* base, unsigned elem, uint64_t inner, uint64_t outer, uint64_t row_bytes,
                      unsigned box_inner, unsigned box_outer, unsigned swizzle)
        : fields{static_cast<const unsigned char*>(base), inner, outer, row_bytes, elem, box_inner, box_outer, swizzle} {}
    template <class T>
    operator T() const {
        static_assert(sizeof(T) == 128, "a tensor map parameter is 128 bytes");
        T map{};
        std::memcpy(&map, &fields, sizeof fields);
        return map;
    }
};
namespace ptx {
struct AsyncCopy {
    unsigned char* dst;
    const unsigned char* src;
    int size, bytes;   // `bytes` of `size` come from src, the rest are zeros
    void land() const {
        std::memcpy(dst, src, bytes);
        std::memset(dst + bytes, 0, size - bytes);
    }
};
}  // namespace ptx

// What each thread has of its own: the scheduler moves it into the globals below as the thread
// starts to run, and back out as it hands over.
struct ThreadState {
    dim3 thread_idx, block_idx;
    Block* block = nullptr;
    Cluster* cluster = nullptr;
    std::vector<std::vector<ptx::AsyncCopy>> groups{1};   // its cp.async groups: committed ones, then the open one
    unsigned cluster_arrival = 0;                         // its token of barrier.cluster
};
struct Fiber {
    ucontext_t context;
    std::unique_ptr<char[]> stack;
    ThreadState state;
    bool done = false;
    std::exception_ptr error;
};
inline Block* block = nullptr;            // the running thread's
inline Cluster* cluster = nullptr;
inline unsigned char* dynamic_smem = nullptr;
inline unsigned cluster_arrival = 0;
namespace ptx {
inline std::vector<std::vector<AsyncCopy>> groups(1);
}
inline void yield() { swapcontext(&current->context, &scheduler); }
}  // namespace emu

inline dim3 threadIdx, blockIdx;          // the running thread's
inline dim3 blockDim, gridDim;

inline unsigned emu_thread() { return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z); }

inline void __syncthreads() { emu::block->all.arrive_and_wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) { emu::block->warps[emu_thread() / 32]->arrive_and_wait(); }

template <class T>
T __shfl_xor_sync(unsigned, T v, int lane_mask, int width = 32) {
    static_assert(sizeof(T) <= sizeof(uint64_t));
    const unsigned t = emu_thread(), lane = t % 32, base = t - lane;
    const unsigned src = (lane & ~unsigned(width - 1)) | ((lane ^ lane_mask) & unsigned(width - 1));
    emu::Barrier& warp = *emu::block->warps[t / 32];
    std::memcpy(&emu::block->slots[t], &v, sizeof(T));
    warp.arrive_and_wait();
    T out;
    std::memcpy(&out, &emu::block->slots[base + src], sizeof(T));
    warp.arrive_and_wait();
    return out;
}

template <class T>
T atomicAdd(T* p, T v) {
    const T old = *p;
    *p = old + v;
    return old;
}

inline float __int_as_float(int x) { return std::bit_cast<float>(x); }
inline float __uint_as_float(unsigned x) { return std::bit_cast<float>(x); }
inline unsigned __float_as_uint(float x) { return std::bit_cast<unsigned>(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
template <class T>
void __stcg(T* p, T v) { *p = v; }
template <class T>
T __ldcg(const T* p) { return *p; }
// The shared "address" of a pointer into the dynamic shared memory: its offset there.
inline size_t __cvta_generic_to_shared(const void* p) {
    return static_cast<size_t>(static_cast<const unsigned char*>(p) - emu::dynamic_smem);
}

// ---- the inline PTX of the kernels --------------------------------------------------------------
namespace emu::ptx {
inline void cp_async(unsigned dst, const void* src, int size, int bytes) {
    groups.back().push_back({dynamic_smem + dst, static_cast<const unsigned char*>(src), size, bytes});
}
inline void cp_async_cg_shared_global(unsigned dst, const void* src, int bytes) { cp_async(dst, src, 16, bytes); }
inline void cp_async_ca_shared_global(unsigned dst, const void* src, int size, int bytes) {
    cp_async(dst, src, size, bytes);
}
inline void cp_async_commit_group() { groups.emplace_back(); }
inline void cp_async_wait_group(int pending) {   // land all but the newest `pending` committed groups
    while (groups.size() - 1 > static_cast<size_t>(pending)) {
        for (const AsyncCopy& c : groups.front()) c.land();
        groups.erase(groups.begin());
    }
}

inline void cvt_rna_tf32_f32(unsigned& r, float x) {   // to nearest, ties away from zero; low 13 bits 0
    const unsigned u = std::bit_cast<unsigned>(x);
    r = std::isfinite(x) ? (u + 0x1000u) & 0xffffe000u : u;
}

// a to bfloat16 in the high half of r, b in the low half, each to nearest even (NaN stays NaN).
inline void cvt_rn_bf16x2_f32(unsigned& r, float a, float b) {
    auto bf16 = [](float x) -> unsigned {
        const unsigned u = std::bit_cast<unsigned>(x);
        return std::isnan(x) ? (u >> 16) | 0x40u : (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    };
    r = bf16(a) << 16 | bf16(b);
}

// The TF32 value (the top 19 bits) of a 32-bit fragment register.
inline double tf32_value(uint32_t u) { return std::bit_cast<float>(u & 0xffffe000u); }
// Element (r, k) of a warp's 16 x 8 A fragment (mma.sync's, and wgmma's register A per warp), the
// warp's first lane `base` having published its lanes' registers in block->fragments: lane (g, t)
// holds rows g, g+8 at k t, t+4 (a0 a1 a2 a3 = (g,t) (g+8,t) (g,t+4) (g+8,t+4)).
inline double fragment_a(unsigned base, unsigned r, unsigned k) {
    return tf32_value(block->fragments[base + r % 8 * 4 + k % 4][(r >= 8) + 2 * (k >= 4)]);
}

// A warp's MMA, D (16 x 8) = A (16 x K) B (K x 8) + C, C = D, summed in double: each lane
// publishes its fragment registers in block->fragments, a(base, r, k) and b(base, k, n) read the
// warp's operands from them (its first lane `base`), and the lane (g, t) = (lane / 4, lane % 4)
// gets D rows g, g+8 at columns 2t, 2t+1.
template <unsigned K, class OperandA, class OperandB>
inline void warp_mma(float* const (&d)[4], const std::array<uint32_t, 6>& registers, OperandA a, OperandB b) {
    const unsigned t = emu_thread(), lane = t % 32, base = t - lane;
    Barrier& warp = *block->warps[t / 32];
    block->fragments[t] = registers;
    warp.arrive_and_wait();
    for (unsigned i = 0; i < 4; ++i) {
        const unsigned row = lane / 4 + 8 * (i / 2), col = lane % 4 * 2 + i % 2;
        double sum = *d[i];
        for (unsigned k = 0; k < K; ++k) sum += a(base, row, k) * b(base, k, col);
        *d[i] = float(sum);
    }
    warp.arrive_and_wait();
}

// m16n8k8 on TF32: A as fragment_a says; B k t, t+4 of column g.
inline void mma_sync_aligned_m16n8k8_row_col_f32_tf32_tf32_f32(float& d0, float& d1, float& d2, float& d3,
                                                                unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                                                unsigned b0, unsigned b1) {
    warp_mma<8>({&d0, &d1, &d2, &d3}, {a0, a1, a2, a3, b0, b1}, fragment_a, [](unsigned base, unsigned k, unsigned n) {
        return tf32_value(block->fragments[base + n * 4 + k % 4][4 + (k >= 4)]);
    });
}

// The bfloat16 value of the low (half 0) or high (half 1) 16 bits of a 32-bit fragment register.
inline double bf16_value(uint32_t u, unsigned half) { return std::bit_cast<float>((u >> (16 * half)) << 16); }

// m16n8k16 on bfloat16 (D float32): a0, a1 hold rows g, g+8 at k 2t, 2t+1 (the lower k in the low
// half); a2, a3 the same rows at k 2t+8, 2t+9; b0, b1 column g at k 2t, 2t+1 and 2t+8, 2t+9.
inline void mma_sync_aligned_m16n8k16_row_col_f32_bf16_bf16_f32(float& d0, float& d1, float& d2, float& d3,
                                                                 unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                                                 unsigned b0, unsigned b1) {
    auto a = [](unsigned base, unsigned r, unsigned k) {
        return bf16_value(block->fragments[base + r % 8 * 4 + k % 8 / 2][(r >= 8) + 2 * (k >= 8)], k % 2);
    };
    auto b = [](unsigned base, unsigned k, unsigned n) {
        return bf16_value(block->fragments[base + n * 4 + k % 8 / 2][4 + (k >= 8)], k % 2);
    };
    warp_mma<16>({&d0, &d1, &d2, &d3}, {a0, a1, a2, a3, b0, b1}, a, b);
}

// mbarriers, by their shared address: a phase completes when its `count` arrivals are in; a wait
// for the phase of parity `parity` returns once it has.
inline void mbarrier_init_shared(unsigned bar, unsigned count) { block->mbarriers[bar] = {count, count, 0}; }
// The phase completes once every arrival is in and every expected byte landed.
inline void complete_if_due(Block::Mbarrier& b) {
    if (b.pending == 0 && b.tx == 0) {
        b.pending = b.count;
        ++b.phase;
    }
}
inline void arrive(Block& owner, unsigned bar) {
    ++progress;
    Block::Mbarrier& b = owner.mbarriers.at(bar);
    --b.pending;
    complete_if_due(b);
}
// mapa: `address` in the shared memory of cluster block `rank`, as (rank + 1) << 24 | address.
inline void mapa_shared(unsigned& remote, unsigned address, int rank) { remote = unsigned(rank + 1) << 24 | address; }
// mbarrier.arrive .shared::cta, or .shared::cluster on an address from mapa.
inline void mbarrier_arrive_shared(unsigned bar) {
    if (bar >> 24) arrive(*cluster->blocks.at((bar >> 24) - 1), bar & 0xffffff);
    else arrive(*block, bar);
}
inline void barrier_cluster_arrive_release() { cluster_arrival = cluster->all.arrive(); }
inline void barrier_cluster_wait_acquire() { cluster->all.wait(cluster_arrival); }
// mbarrier.arrive.expect_tx: `bytes` more to land in this phase, then the arrival.
inline void mbarrier_arrive_expect_tx_shared(unsigned bar, unsigned bytes) {
    ++progress;
    Block::Mbarrier& b = block->mbarriers.at(bar);
    b.tx += bytes;
    --b.pending;
    complete_if_due(b);
}
// A bulk copy lands, row-major within the box, each byte at its address
// in the map's swizzle (the 16-byte chunk bits 4.. XORed with bits 7..: address bits the GPU uses),
// zeros where the box passes the array's edges; its bytes count off what `b` expects.
inline void land(Block::Mbarrier& b, const Block::BulkCopy& copy) {
    TensorMapFields m;
    std::memcpy(&m, copy.map.data(), sizeof m);
    const unsigned mask = m.swizzle == 128 ? 7 : m.swizzle == 64 ? 3 : m.swizzle == 32 ? 1 : 0;
    for (uint64_t o = 0; o < m.box_outer; ++o)
        for (uint64_t i = 0; i < m.box_inner; ++i) {
            const int64_t x = copy.c0 + int64_t(i), y = copy.c1 + int64_t(o);
            const bool inside = x >= 0 && y >= 0 && uint64_t(x) < m.inner && uint64_t(y) < m.outer;
            for (uint32_t e = 0; e < m.elem; ++e) {
                const size_t logical = copy.dst + (o * m.box_inner + i) * m.elem + e;
                copy.smem[logical ^ (((logical >> 7) & mask) << 4)] = inside ? m.base[y * m.row_bytes + x * m.elem + e] : 0;
            }
        }
    b.tx -= int64_t(m.box_inner) * m.box_outer * m.elem;
    ++progress;
}
// cp.async.bulk.tensor.2d ... mbarrier::complete_tx::bytes: the box of the map at `map` whose first
// element is (c0 along a row, c1 across rows), queued on `bar` of block `owner`, for its shared memory.
inline void bulk_copy(Block& owner, unsigned dst, uint64_t map, int c0, int c1, unsigned bar) {
    ++progress;
    Block::BulkCopy copy{owner.smem, dst, {}, c0, c1};
    std::memcpy(copy.map.data(), reinterpret_cast<const void*>(map), 128);
    Block::Mbarrier& b = owner.mbarriers.at(bar);
#ifdef EMU_BULK_COPIES_LAND_AT_ISSUE
    land(b, copy);
    complete_if_due(b);
#else
    b.queued.push_back(copy);
#endif
}
inline void cp_async_bulk_tensor_2d_shared(unsigned dst, uint64_t map, int c0, int c1, unsigned bar) {
    bulk_copy(*block, dst, map, c0, c1, bar);
}
// ... .multicast::cluster: the same box into each cluster block of `blocks` (a bit a rank), at the
// same addresses there.
inline void cp_async_bulk_tensor_2d_shared(unsigned dst, uint64_t map, int c0, int c1, unsigned bar, unsigned short blocks) {
    for (unsigned rank = 0; rank < cluster->blocks.size(); ++rank)
        if (blocks >> rank & 1) bulk_copy(*cluster->blocks[rank], dst, map, c0, c1, bar);
}
inline void mbarrier_try_wait_parity_shared(unsigned& done, unsigned bar, unsigned parity) {
    Block::Mbarrier& b = block->mbarriers.at(bar);
    wait_until([&] {
        for (const Block::BulkCopy& copy : b.queued) land(b, copy);
        b.queued.clear();
        complete_if_due(b);
        return (b.phase & 1) != parity;
    });
    done = 1;
}
// The arrival once this thread's copies so far have landed: they land now, the latest a GPU may.
inline void cp_async_mbarrier_arrive_noinc_shared(unsigned bar) {
    cp_async_commit_group();
    cp_async_wait_group(0);
    mbarrier_arrive_shared(bar);
}
// bar.sync id, count: barrier `id` of `count` threads (not __syncthreads' barrier 0).
inline void bar_sync(unsigned id, unsigned count) {
    auto& slot = block->named[id];
    if (!slot) slot = std::make_unique<Barrier>(count);
    slot->arrive_and_wait();
}

// Ordering of shared memory between the generic and async proxies, of mbarrier initialization, and
// wgmma's group fences: the emulated wgmma reads shared memory when it is issued and the emulated
// threads take turns on one OS thread, so these have nothing to order.
inline void fence_proxy_async_shared() {}
inline void fence_mbarrier_init_release_cluster() {}
inline void wgmma_fence_sync_aligned() {}
inline void wgmma_commit_group_sync_aligned() {}
inline void wgmma_wait_group_sync_aligned(int) {}

// The shared-memory address of byte `byte` of row `row` of a K-major operand described by `desc`:
// start address (bits 0-13, 16-byte units), stride between 8-row atoms (bits 32-45), and the
// swizzle (bits 62-63): 1, 128-byte rows with address bits 4-6 XORed with bits 7-9; 2, 64-byte rows
// with bits 4-5 XORed with bits 7-8.
inline size_t wgmma_address(uint64_t desc, unsigned row, unsigned byte) {
    const unsigned layout = desc >> 62;
    if (layout != 1 && layout != 2) throw std::runtime_error("emulated wgmma: only the 128- and 64-byte swizzles");
    const size_t start = (desc & 0x3fff) << 4, atom_stride = ((desc >> 32) & 0x3fff) << 4;
    const size_t width = layout == 1 ? 128 : 64, mask = layout == 1 ? 7 : 3;
    const size_t logical = start + row / 8 * atom_stride + row % 8 * width + byte;
    return logical ^ (((logical >> 7) & mask) << 4);
}

// The float32 at row `row`, element `k` of a K-major TF32 operand.
inline float wgmma_operand(uint64_t desc, unsigned row, unsigned k) {
    float x;
    std::memcpy(&x, dynamic_smem + wgmma_address(desc, row, 4 * k), 4);
    return x;
}

// The shared-memory address of element (row, k) of an M/N-major 16-bit operand described by `desc`
// (the 128-byte swizzle only): 64-row blocks the leading byte offset apart (bits 16-29), each k a
// 128-byte row, 8-k atoms the stride byte offset apart (bits 32-45).
inline size_t wgmma_address_mn(uint64_t desc, unsigned row, unsigned k) {
    if (desc >> 62 != 1) throw std::runtime_error("emulated wgmma: M/N-major operands in the 128-byte swizzle only");
    const size_t start = (desc & 0x3fff) << 4, block = ((desc >> 16) & 0x3fff) << 4, atom = ((desc >> 32) & 0x3fff) << 4;
    const size_t logical = start + row / 64 * block + k / 8 * atom + k % 8 * 128 + 2 * (row % 64);
    return logical ^ (((logical >> 7) & 7) << 4);
}

// The bfloat16 at row `row`, element `k` of a BF16 operand, K-major or (transposed) M/N-major, as a double.
inline double wgmma_bf16_operand(uint64_t desc, unsigned row, unsigned k, bool transposed) {
    uint16_t x;
    std::memcpy(&x, dynamic_smem + (transposed ? wgmma_address_mn(desc, row, k) : wgmma_address(desc, row, 2 * k)), 2);
    return std::bit_cast<float>(uint32_t(x) << 16);
}

// One operand of an emulated wgmma statement: an accumulator (by reference) or a value (a
// descriptor, a transpose flag). An array of these stands for the statement's operand list, which
// for m64n256 is 130 operands long (a std::tuple of them took g++ seconds to instantiate).
struct WgmmaOperand {
    WgmmaOperand(float& x) : acc(&x) {}
    template <class I>
        requires std::is_integral_v<I>
    WgmmaOperand(I x) : value(uint64_t(x)) {}
    float* acc = nullptr;
    uint64_t value = 0;
};

// wgmma.mma_async m64nNk8 .f32.tf32.tf32, A and B from shared memory (K-major), D += A B^T: this
// thread's N/2 accumulators (d[4j + i] at row 16 warp + lane/4 + 8 (i/2), column 8j + 2 (lane%4) + i%2),
// then the descriptors of A and B, then scale-d where an operand (0: d's values before not read,
// D = A B^T). The k16 .bf16 form sums 16 products of bfloat16 operands alike,
// each operand K-major or, with its transpose flag (the statement's last two operands), M/N-major.
template <unsigned N, unsigned K, class Operand>
void wgmma(Operand operand, const WgmmaOperand* ops, bool trans_a = false, bool trans_b = false, bool scale_d = true) {
    const uint64_t a = ops[N / 2].value, b = ops[N / 2 + 1].value;
    const unsigned t = emu_thread() % 128, warp = t / 32, lane = t % 32;
    for (unsigned r = 0; r < N / 2; ++r) {
        const unsigned row = 16 * warp + lane / 4 + 8 * (r % 4 / 2), col = 8 * (r / 4) + 2 * (lane % 4) + r % 2;
        double sum = scale_d ? *ops[r].acc : 0.0;
        for (unsigned k = 0; k < K; ++k) sum += operand(a, row, k, trans_a) * operand(b, col, k, trans_b);
        *ops[r].acc = float(sum);
    }
}
inline double tf32_operand(uint64_t desc, unsigned row, unsigned k, bool) {
    return tf32_value(std::bit_cast<uint32_t>(wgmma_operand(desc, row, k)));
}
// wgmma.mma_async m64nNk8 .f32.tf32.tf32 with A from registers: this thread's N/2 accumulators, its
// 4 registers of A (each warp's 16 rows as mma.sync's A fragment, fragment_a), B's descriptor,
// scale-d where an operand. A row's values come from the lanes of the warp that owns it, passed as
// mma.sync's fragments are.
template <unsigned N>
void wgmma_register_a(const WgmmaOperand* ops, bool scale_d) {
    const unsigned thread = emu_thread(), lane = thread % 32, base = thread - lane;
    Barrier& warp_barrier = *block->warps[thread / 32];
    block->fragments[thread] = {uint32_t(ops[N / 2].value), uint32_t(ops[N / 2 + 1].value), uint32_t(ops[N / 2 + 2].value),
                                uint32_t(ops[N / 2 + 3].value), 0, 0};
    warp_barrier.arrive_and_wait();
    const uint64_t b = ops[N / 2 + 4].value;
    for (unsigned r = 0; r < N / 2; ++r) {
        const unsigned row = lane / 4 + 8 * (r % 4 / 2), col = 8 * (r / 4) + 2 * (lane % 4) + r % 2;
        double sum = scale_d ? *ops[r].acc : 0.0;
        for (unsigned k = 0; k < 8; ++k) sum += fragment_a(base, row, k) * tf32_operand(b, col, k, false);
        *ops[r].acc = float(sum);
    }
    warp_barrier.arrive_and_wait();
}
#define EMU_WGMMA(N)                                                                                  \
    template <class... Args>                                                                               \
    void wgmma_mma_async_sync_aligned_m64n##N##k8_f32_tf32_tf32(Args&&... args) {                          \
        constexpr size_t count = sizeof...(Args);                                                          \
        static_assert(count == N / 2 + 2 || count == N / 2 + 3 || count == N / 2 + 5 || count == N / 2 + 6, \
                      "wgmma m64n" #N "k8: N/2 accumulators, 2 descriptors or A's 4 registers and B's "    \
                      "descriptor, scale-d where not 1");                                                  \
        const WgmmaOperand ops[] = {WgmmaOperand(args)...};                                                \
        if constexpr (count >= N / 2 + 5)                                                                  \
            wgmma_register_a<N>(ops, count == N / 2 + 5 || ops[N / 2 + 5].value != 0);                     \
        else                                                                                               \
            wgmma<N, 8>(tf32_operand, ops, false, false, count == N / 2 + 2 || ops[N / 2 + 2].value != 0); \
    }                                                                                                      \
    template <class... Args>                                                                               \
    void wgmma_mma_async_sync_aligned_m64n##N##k16_f32_bf16_bf16(Args&&... args) {                         \
        static_assert(sizeof...(Args) == N / 2 + 4, "wgmma m64n" #N "k16: N/2 accumulators, 2 descriptors, 2 transpose flags"); \
        const WgmmaOperand ops[] = {WgmmaOperand(args)...};                                                \
        wgmma<N, 16>(wgmma_bf16_operand, ops, ops[N / 2 + 2].value != 0, ops[N / 2 + 3].value != 0);       \
    }
EMU_WGMMA(8) EMU_WGMMA(16) EMU_WGMMA(24) EMU_WGMMA(32) EMU_WGMMA(48)
EMU_WGMMA(64) EMU_WGMMA(80) EMU_WGMMA(96) EMU_WGMMA(112) EMU_WGMMA(128)
EMU_WGMMA(144) EMU_WGMMA(160) EMU_WGMMA(176) EMU_WGMMA(192) EMU_WGMMA(208)
EMU_WGMMA(224) EMU_WGMMA(240) EMU_WGMMA(256)
#undef EMU_WGMMA
}  // namespace emu::ptx

namespace emu {
constexpr size_t STACK_BYTES = 256 << 10;   // a thread's stack (pages are committed as it touches them)
inline std::function<void()> kernel_body;   // the kernel's call with its arguments

// A thread's life: the kernel, then out of its barriers (an exception is kept for the scheduler).
inline void fiber_main() {
    try {
        kernel_body();
    } catch (...) {
        current->error = std::current_exception();
    }
    const unsigned t = emu_thread();
    block->warps[t / 32]->arrive_and_drop();
    block->all.arrive_and_drop();
    cluster->all.arrive_and_drop();
    current->done = true;
}

// The running thread's own state into the globals, and back.
inline void switch_in(Fiber& f) {
    current = &f;
    threadIdx = f.state.thread_idx;
    blockIdx = f.state.block_idx;
    block = f.state.block;
    cluster = f.state.cluster;
    dynamic_smem = f.state.block->smem;
    cluster_arrival = f.state.cluster_arrival;
    ptx::groups.swap(f.state.groups);
}
inline void switch_out(Fiber& f) {
    f.state.cluster_arrival = cluster_arrival;
    ptx::groups.swap(f.state.groups);
}

// Run the threads to their ends, each in turn to its next wait; a deadlock, or a thread's exception, throws.
inline void run_fibers(std::vector<Fiber>& fibers) {
    for (size_t live = fibers.size(); live;) {
        const unsigned long long before = progress;
        for (Fiber& f : fibers) {
            if (f.done) continue;
            switch_in(f);
            swapcontext(&scheduler, &f.context);
            switch_out(f);
            if (f.error) std::rethrow_exception(f.error);
            live -= f.done;
            progress += f.done;
        }
        if (live && progress == before)
            throw std::runtime_error("emulated block: every live thread waits, and nothing they wait for can come (a deadlock)");
    }
}

// Run kernel(args...) on a grid of blocks, each of `threads` threads with `smem` bytes of dynamic
// shared memory, in clusters of `cluster` blocks (the grid a whole number of them).
template <class Kernel, class... Args>
void launch(Kernel kernel, dim3 grid, dim3 threads, size_t smem, dim3 cluster_dims, Args... args) {
    gridDim = grid;
    blockDim = threads;
    const unsigned n = threads.x * threads.y * threads.z;
    const unsigned blocks = cluster_dims.x * cluster_dims.y * cluster_dims.z;
    if (grid.x % cluster_dims.x || grid.y % cluster_dims.y || grid.z % cluster_dims.z)
        throw std::runtime_error("emulated launch: the grid is not a whole number of clusters");
    kernel_body = [&] { kernel(args...); };
    std::vector<Fiber> fibers(blocks * n);
    for (Fiber& f : fibers) f.stack.reset(new char[STACK_BYTES]);
    for (unsigned cz = 0; cz < grid.z; cz += cluster_dims.z)
        for (unsigned cy = 0; cy < grid.y; cy += cluster_dims.y)
            for (unsigned cx = 0; cx < grid.x; cx += cluster_dims.x) {
                Cluster c(blocks, n);
                std::vector<std::unique_ptr<Block>> members;
                for (unsigned r = 0; r < blocks; ++r) {
                    members.push_back(std::make_unique<Block>(n, smem));
                    c.blocks.push_back(members.back().get());
                }
                for (unsigned r = 0; r < blocks; ++r)
                    for (unsigned t = 0; t < n; ++t) {
                        Fiber& f = fibers[r * n + t];
                        f.state = {{t % threads.x, t / threads.x % threads.y, t / (threads.x * threads.y)},
                                   {cx + r % cluster_dims.x, cy + r / cluster_dims.x % cluster_dims.y,
                                    cz + r / (cluster_dims.x * cluster_dims.y)},
                                   c.blocks[r], &c};
                        f.done = false;
                        getcontext(&f.context);
                        f.context.uc_stack = {f.stack.get(), 0, STACK_BYTES};
                        f.context.uc_link = &scheduler;
                        makecontext(&f.context, fiber_main, 0);
                    }
                run_fibers(fibers);
            }
}
}  // namespace emu
