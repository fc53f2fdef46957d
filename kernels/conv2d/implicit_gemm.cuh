// The main loop of an implicit GEMM on the GEMM's math path (conv2d/math.cuh, whose constants the
// template defines): acc = A B over depths [k_begin, k_end) for the block's BM rows and BN columns,
// where a(i, kd) is A's element at the block's row i and depth kd and b(j, kd) is B's at column j:
// each gathers from memory that holds neither matrix, and returns zero past its rows or columns
// (depths past k_end are zeroed here). Each BK slice is gathered into shared memory, As [BK][LDS_A]
// and Bs [BK][LDS_B], stored [k][row] as the math path reads it. Consecutive threads take consecutive
// depths of a column of B, and consecutive rows of A, or with A_ALONG_K consecutive depths of a row
// (whichever is contiguous in memory).
{% if stages == 1 %}
template <bool A_ALONG_K, class GatherA, class GatherB>
__device__ __forceinline__ void multiply_implicit(GatherA a, GatherB b, int k_begin, int k_end, T* As, T* Bs,
                                                  T (&acc)[RM][RN], int tid) {
#pragma unroll
    for (int i = 0; i < RM; ++i)
#pragma unroll
        for (int j = 0; j < RN; ++j) acc[i][j] = T(0);
    for (int k0 = k_begin; k0 < k_end; k0 += BK) {
        for (int idx = tid; idx < BM * BK; idx += THREADS) {
            const int i = A_ALONG_K ? idx / BK : idx % BM, k = A_ALONG_K ? idx % BK : idx / BM;
            As[k * LDS_A + i] = k0 + k < k_end ? a(i, k0 + k) : T(0);
        }
        for (int idx = tid; idx < BN * BK; idx += THREADS) {
            const int j = idx / BK, k = idx % BK;
            Bs[k * LDS_B + j] = k0 + k < k_end ? b(j, k0 + k) : T(0);
        }
        __syncthreads();
        multiply_tiles(As, Bs, acc, tid);
        __syncthreads();
    }
}
{% else %}
// Two stages: each thread gathers the next slice into registers while the block multiplies this one
// (its loads in flight under the MMAs), then stores them into the other stage's tiles; one barrier a
// slice. The second stage's tiles follow the first's: [As][Bs][As'][Bs']. Each operand is gathered
// through an object (the template's) with a row state, decoded once per thread (row(i), fixed across
// slices), a depth state, decoded once per distinct depth a thread gathers (depth(kd)), and at(row,
// depth), the element (zero past the operand's rows). Where the block's threads are a multiple of
// BM (of BK along K) a thread's elements share their row (depth), decoded once.
constexpr int A_LOADS = (BM * BK + THREADS - 1) / THREADS, B_LOADS = (BN * BK + THREADS - 1) / THREADS;
constexpr int STAGE_ELEMS = BK * (LDS_A + LDS_B);

// Row and depth, in the tile, of a thread's load l of a ROWS x BK tile: consecutive threads along the
// rows, or with ALONG_K along the depths.
template <bool ALONG_K, int ROWS>
__device__ __forceinline__ int load_row(int tid, int l) {
    if constexpr (ALONG_K)
        return THREADS % BK == 0 ? tid / BK + l * (THREADS / BK) : (tid + l * THREADS) / BK;
    else
        return THREADS % ROWS == 0 ? tid % ROWS : (tid + l * THREADS) % ROWS;
}
template <bool ALONG_K, int ROWS>
__device__ __forceinline__ int load_depth(int tid, int l) {
    if constexpr (ALONG_K)
        return THREADS % BK == 0 ? tid % BK : (tid + l * THREADS) % BK;
    else
        return THREADS % ROWS == 0 ? tid / ROWS + l * (THREADS / ROWS) : (tid + l * THREADS) / ROWS;
}

template <bool A_ALONG_K, class OperandA, class OperandB>
__device__ __forceinline__ void multiply_implicit(const OperandA& a, const OperandB& b, int k_begin, int k_end,
                                                  T* As, T* Bs, T (&acc)[RM][RN], int tid) {
#pragma unroll
    for (int i = 0; i < RM; ++i)
#pragma unroll
        for (int j = 0; j < RN; ++j) acc[i][j] = T(0);
    auto in_tile = [&](int l, int size) { return size % THREADS == 0 || tid + l * THREADS < size; };
    typename OperandA::Row a_rows[A_LOADS];
    typename OperandB::Row b_rows[B_LOADS];
#pragma unroll
    for (int l = 0; l < A_LOADS; ++l) a_rows[l] = a.row(load_row<A_ALONG_K, BM>(tid, l));
#pragma unroll
    for (int l = 0; l < B_LOADS; ++l) b_rows[l] = b.row(load_row<true, BN>(tid, l));
    T ra[A_LOADS], rb[B_LOADS];
    auto gather = [&](int k0) {
#pragma unroll
        for (int l = 0; l < A_LOADS; ++l) {
            const int kd = k0 + load_depth<A_ALONG_K, BM>(tid, l);
            ra[l] = in_tile(l, BM * BK) && kd < k_end ? a.at(a_rows[l], a.depth(kd)) : T(0);
        }
#pragma unroll
        for (int l = 0; l < B_LOADS; ++l) {
            const int kd = k0 + load_depth<true, BN>(tid, l);
            rb[l] = in_tile(l, BN * BK) && kd < k_end ? b.at(b_rows[l], b.depth(kd)) : T(0);
        }
    };
    auto put = [&](T* as, T* bs) {
#pragma unroll
        for (int l = 0; l < A_LOADS; ++l)
            if (in_tile(l, BM * BK)) as[load_depth<A_ALONG_K, BM>(tid, l) * LDS_A + load_row<A_ALONG_K, BM>(tid, l)] = ra[l];
#pragma unroll
        for (int l = 0; l < B_LOADS; ++l)
            if (in_tile(l, BN * BK)) bs[load_depth<true, BN>(tid, l) * LDS_B + load_row<true, BN>(tid, l)] = rb[l];
    };
    gather(k_begin);
    int stage = 0;
    for (int k0 = k_begin; k0 < k_end; k0 += BK, stage ^= 1) {
        T* as = As + stage * STAGE_ELEMS;
        T* bs = Bs + stage * STAGE_ELEMS;
        put(as, bs);          // the other stage was last read before the barrier of the slice before
        __syncthreads();
        if (k0 + BK < k_end) gather(k0 + BK);
        multiply_tiles(as, bs, acc, tid);
    }
}
{% endif %}
