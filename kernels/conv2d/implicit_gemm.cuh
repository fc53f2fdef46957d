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
// slice. The second stage's tiles follow the first's: [As][Bs][As'][Bs'].
constexpr int A_LOADS = (BM * BK + THREADS - 1) / THREADS, B_LOADS = (BN * BK + THREADS - 1) / THREADS;
constexpr int STAGE_ELEMS = BK * (LDS_A + LDS_B);

template <bool A_ALONG_K, class GatherA, class GatherB>
__device__ __forceinline__ void multiply_implicit(GatherA a, GatherB b, int k_begin, int k_end, T* As, T* Bs,
                                                  T (&acc)[RM][RN], int tid) {
#pragma unroll
    for (int i = 0; i < RM; ++i)
#pragma unroll
        for (int j = 0; j < RN; ++j) acc[i][j] = T(0);
    T ra[A_LOADS], rb[B_LOADS];
    auto gather = [&](int k0) {
#pragma unroll
        for (int l = 0; l < A_LOADS; ++l) {
            const int idx = tid + l * THREADS;
            const int i = A_ALONG_K ? idx / BK : idx % BM, k = A_ALONG_K ? idx % BK : idx / BM;
            ra[l] = idx < BM * BK && k0 + k < k_end ? a(i, k0 + k) : T(0);
        }
#pragma unroll
        for (int l = 0; l < B_LOADS; ++l) {
            const int idx = tid + l * THREADS, j = idx / BK, k = idx % BK;
            rb[l] = idx < BN * BK && k0 + k < k_end ? b(j, k0 + k) : T(0);
        }
    };
    auto put = [&](T* as, T* bs) {
#pragma unroll
        for (int l = 0; l < A_LOADS; ++l) {
            const int idx = tid + l * THREADS;
            const int i = A_ALONG_K ? idx / BK : idx % BM, k = A_ALONG_K ? idx % BK : idx / BM;
            if (idx < BM * BK) as[k * LDS_A + i] = ra[l];
        }
#pragma unroll
        for (int l = 0; l < B_LOADS; ++l) {
            const int idx = tid + l * THREADS;
            if (idx < BN * BK) bs[idx % BK * LDS_B + idx / BK] = rb[l];
        }
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
