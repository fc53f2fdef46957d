// gemm_wgmma.cu.j2's shared-memory layout (the swizzles, the wgmma descriptors) and its PTX:
// cp.async, wgmma, mbarriers, clusters, bulk tensor copies, named barriers; where a wgmma tile's
// accumulators sit.

// ---- shared memory layout -------------------------------------------------------------------
// The 128-byte swizzle: within each 8-row, 1024-byte atom, the 16-byte chunk c of row r sits at
// chunk c ^ (r % 8), so that the 8 rows' chunks of one k spread over all banks. Tiles start on
// 1024-byte boundaries, where the hardware's swizzle (on address bits 4-6 ^ 7-9) agrees.
__host__ __device__ constexpr int swizzled(int row, int chunk) { return row * 128 + ((chunk ^ (row & 7)) << 4); }
// The 64-byte swizzle of 64-byte rows (prepared bfloat16 tiles): in each 8-row, 512-byte atom,
// chunk c of row r sits at chunk c ^ (r / 2 % 4) (address bits 4-5 ^ 7-8).
__host__ __device__ constexpr int swizzled64(int row, int chunk) { return row * 64 + ((chunk ^ ((row >> 1) & 3)) << 4); }
// Where element (k, row) of an M/N-major tile landed swizzled (bfloat16 operands, a float32 A read
// into registers) sits: blocks of MN_ROWS rows (128 bytes), BK k-rows of 128 bytes each (MN_BLOCK
// bytes), each k-row in the 128-byte swizzle.
constexpr int MN_ROWS = 128 / sizeof(TIn), MN_BLOCK = BK * 128;
__host__ __device__ constexpr int landed_mn(int k, int row) {
    return row / MN_ROWS * MN_BLOCK + swizzled(k, row % MN_ROWS / PER_COPY) + row % PER_COPY * sizeof(TIn);
}

// The shared-memory address of a pointer into shared memory.
__device__ __forceinline__ unsigned smem_address(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }

// The wgmma matrix descriptor of a K-major tile swizzled as above with ROW-byte rows (128 or 64),
// from `tile` (its 8-row atoms 8 ROW bytes apart) at byte `k_offset` along the row: the start
// address, the stride between atoms, and the layout (bits 62-63: 1 = 128-byte swizzle, 2 = 64-byte);
// the leading byte offset is unused by it.
template <int ROW = 128>
__device__ __forceinline__ unsigned long long descriptor(const unsigned char* tile, int k_offset) {
    const unsigned long long start = smem_address(tile) + k_offset;
    return ((start & 0x3ffff) >> 4) | (1ull << 16) | ((8ull * ROW >> 4) << 32) | ((ROW == 128 ? 1ull : 2ull) << 62);
}

// The descriptor of an M/N-major bfloat16 tile laid out as landed_mn says, from k-row 0 of `tile`:
// 64-row blocks MN_BLOCK bytes apart (the leading byte offset, bits 16-29), 8-k atoms 1024 bytes
// apart (the stride byte offset), the 128-byte swizzle.
__device__ __forceinline__ unsigned long long descriptor_mn(const unsigned char* tile) {
    const unsigned long long start = smem_address(tile);
    return ((start & 0x3ffff) >> 4) | (unsigned long long)(MN_BLOCK >> 4) << 16 | (1024ull >> 4) << 32 | 1ull << 62;
}

// ---- PTX ------------------------------------------------------------------------------------
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(smem_address(dst)), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int PENDING>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" :: "n"(PENDING)); }
// Ordinary shared-memory writes (cp.async, the split) become visible to wgmma's reads.
__device__ __forceinline__ void fence_async_proxy() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int PENDING>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(PENDING) : "memory"); }

// The mbarriers of the warp-specialized pipeline (PRODUCER): a phase completes once `count`
// arrivals are in; a waiter names the parity of the phase it waits for.
__device__ __forceinline__ void mbarrier_init(unsigned long long* bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(smem_address(bar)), "r"(count) : "memory");
}
// Initialized mbarriers become visible to the async proxy (the bulk copies' complete_tx).
__device__ __forceinline__ void fence_mbarrier_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
__device__ __forceinline__ void mbarrier_arrive(unsigned long long* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" :: "r"(smem_address(bar)) : "memory");
}
// Arrives once this thread's cp.async copies so far have landed (counted among the expected arrivals).
__device__ __forceinline__ void cp_async_arrive(unsigned long long* bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" :: "r"(smem_address(bar)) : "memory");
}
__device__ __forceinline__ void mbarrier_wait(unsigned long long* bar, unsigned parity) {
    unsigned done;
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(smem_address(bar)), "r"(parity) : "memory");
    } while (!done);
}
// Arrives, and expects `bytes` more of bulk copies to land before the phase completes.
__device__ __forceinline__ void mbarrier_arrive_expect(unsigned long long* bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" :: "r"(smem_address(bar)), "r"(bytes) : "memory");
}

// The address in the shared memory of cluster block `rank` of what is at `address` in this block's.
__device__ __forceinline__ unsigned cluster_address(unsigned address, int rank) {
    unsigned remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(address), "r"(rank));
    return remote;
}
// Arrives on the mbarrier at `bar`'s place in cluster block `rank` (releasing at the block's scope,
// as the local arrivals do: what it orders, the wgmmas' reads of the slot, are already done).
__device__ __forceinline__ void mbarrier_arrive_cluster(unsigned long long* bar, int rank) {
    asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" :: "r"(cluster_address(smem_address(bar), rank)) : "memory");
}
// Every thread of the cluster meets: what each wrote before is visible to all after.
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release;\n" ::: "memory");
    asm volatile("barrier.cluster.wait.acquire;\n" ::: "memory");
}

// A tensor map (cuTensorMapEncodeTiled's CUtensorMap, opaque), passed by value as a __grid_constant__
// parameter.
struct alignas(64) TensorMap { unsigned long long opaque[16]; };
// The box of `map` at element (c0 along its rows, c1 across them) into shared `dst`, in the map's
// swizzle, zeros past the matrix; its bytes complete on `bar`.
__device__ __forceinline__ void tma_load(void* dst, const TensorMap& map, int c0, int c1, unsigned long long* bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, { %2, %3 }], [%4];\n"
                 :: "r"(smem_address(dst)), "l"(reinterpret_cast<unsigned long long>(&map)), "r"(c0), "r"(c1),
                    "r"(smem_address(bar)) : "memory");
}
// The same box into `dst` of every cluster block in `blocks` (a bit a rank), its bytes completing
// on `bar`'s place in each.
__device__ __forceinline__ void tma_multicast(void* dst, const TensorMap& map, int c0, int c1, unsigned long long* bar,
                                              unsigned short blocks) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster "
                 "[%0], [%1, { %2, %3 }], [%4], %5;\n"
                 :: "r"(smem_address(dst)), "l"(reinterpret_cast<unsigned long long>(&map)), "r"(c0), "r"(c1),
                    "r"(smem_address(bar)), "h"(blocks) : "memory");
}

// Barrier `id` of `count` threads (whole warps): the producer's (1) or the computing warpgroups' (2).
template <int ID, int COUNT>
__device__ __forceinline__ void named_barrier() { asm volatile("bar.sync %0, %1;\n" :: "n"(ID), "n"(COUNT) : "memory"); }
// The threads that compute (every thread without PRODUCER) meet.
__device__ __forceinline__ void sync_computing() {
    if constexpr (PRODUCER) named_barrier<2, 128 * WARPGROUPS>();
    else __syncthreads();
}

// d (64 x BN, this thread's ACC floats) += A (64 x 8, TF32, K-major) * B (BN x 8, TF32, K-major)^T.
__device__ __forceinline__ void wgmma_tf32(float (&d)[ACC], unsigned long long a, unsigned long long b) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n{{ bn }}k8.f32.tf32.tf32 "
                 "{ {% for i in range(bn // 2) %}%{{ i }}{{ ", " if not loop.last }}{% endfor %} }, "
                 "%{{ bn // 2 }}, %{{ bn // 2 + 1 }}, 1, 1, 1;\n"
                 : {% for i in range(bn // 2) %}"+f"(d[{{ i }}]){{ ", " if not loop.last }}{% endfor %}
                 : "l"(a), "l"(b));
}

{% if math == "3xtf32" %}
// d = A (64 x 8, TF32, K-major) * B (BN x 8, TF32, K-major)^T, d's values before not read (scale-d
// 0): the first wgmma of a sum.
__device__ __forceinline__ void wgmma_tf32_first(float (&d)[ACC], unsigned long long a, unsigned long long b) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n{{ bn }}k8.f32.tf32.tf32 "
                 "{ {% for i in range(bn // 2) %}%{{ i }}{{ ", " if not loop.last }}{% endfor %} }, "
                 "%{{ bn // 2 }}, %{{ bn // 2 + 1 }}, %{{ bn // 2 + 2 }}, 1, 1;\n"
                 : {% for i in range(bn // 2) %}"+f"(d[{{ i }}]){{ ", " if not loop.last }}{% endfor %}
                 : "l"(a), "l"(b), "n"(0));
}

{% endif %}
{% if reg_a %}
// d (64 x BN) += A (64 x 8, TF32, from registers: each warp's 16 rows as mma.sync's A fragment) *
// B (BN x 8, TF32, K-major)^T.
__device__ __forceinline__ void wgmma_tf32_rs(float (&d)[ACC], const unsigned (&a)[4], unsigned long long b) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n{{ bn }}k8.f32.tf32.tf32 "
                 "{ {% for i in range(bn // 2) %}%{{ i }}{{ ", " if not loop.last }}{% endfor %} }, "
                 "{ %{{ bn // 2 }}, %{{ bn // 2 + 1 }}, %{{ bn // 2 + 2 }}, %{{ bn // 2 + 3 }} }, %{{ bn // 2 + 4 }}, 1, 1, 1;\n"
                 : {% for i in range(bn // 2) %}"+f"(d[{{ i }}]){{ ", " if not loop.last }}{% endfor %}
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
}
{% if math == "3xtf32" %}
// The same with d's values before not read (scale-d 0): the first wgmma of a sum.
__device__ __forceinline__ void wgmma_tf32_rs_first(float (&d)[ACC], const unsigned (&a)[4], unsigned long long b) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n{{ bn }}k8.f32.tf32.tf32 "
                 "{ {% for i in range(bn // 2) %}%{{ i }}{{ ", " if not loop.last }}{% endfor %} }, "
                 "{ %{{ bn // 2 }}, %{{ bn // 2 + 1 }}, %{{ bn // 2 + 2 }}, %{{ bn // 2 + 3 }} }, %{{ bn // 2 + 4 }}, "
                 "%{{ bn // 2 + 5 }}, 1, 1;\n"
                 : {% for i in range(bn // 2) %}"+f"(d[{{ i }}]){{ ", " if not loop.last }}{% endfor %}
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(0));
}
{% endif %}

{% endif %}
// d += A (64 x 16, bfloat16) * B (BN x 16, bfloat16)^T, each K-major or, transposed (TA, TB),
// M/N-major.
template <int TA, int TB>
__device__ __forceinline__ void wgmma_bf16(float (&d)[ACC], unsigned long long a, unsigned long long b) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n{{ bn }}k16.f32.bf16.bf16 "
                 "{ {% for i in range(bn // 2) %}%{{ i }}{{ ", " if not loop.last }}{% endfor %} }, "
                 "%{{ bn // 2 }}, %{{ bn // 2 + 1 }}, 1, 1, 1, %{{ bn // 2 + 2 }}, %{{ bn // 2 + 3 }};\n"
                 : {% for i in range(bn // 2) %}"+f"(d[{{ i }}]){{ ", " if not loop.last }}{% endfor %}
                 : "l"(a), "l"(b), "n"(TA), "n"(TB));
}

// The descriptor of k16 slice kk of a bfloat16 operand's tile: M/N-major (MN) or K-major.
template <bool MN>
__device__ __forceinline__ unsigned long long bf16_descriptor(const unsigned char* tile, int kk) {
    if constexpr (MN) return descriptor_mn(tile + kk * 16 * 128);
    else return descriptor(tile, 32 * kk);
}

// Thread t of a warpgroup holds, of a 64 x BN wgmma tile, d[4j + i] at row 16w + g + 8(i / 2) and
// column 8j + 2q + i % 2 (w = warp, g = lane / 4, q = lane % 4): the mma.sync C fragment per 8 columns.
__device__ __forceinline__ int acc_row(int t, int i) { return 16 * (t / 32) + (t % 32) / 4 + 8 * ((i % 4) / 2); }
__device__ __forceinline__ int acc_col(int t, int i) { return 8 * (i / 4) + 2 * (t % 4) + i % 2; }
