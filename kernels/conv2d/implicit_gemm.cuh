// The main loop of an implicit GEMM on the GEMM's math path (conv2d/math.cuh, whose constants the
// template defines): acc = A B over depths [k_begin, k_end) for the block's BM rows and BN columns,
// where a(i, kd) is A's element at the block's row i and depth kd and b(j, kd) is B's at column j:
// each gathers from memory that holds neither matrix, and returns zero past its rows or columns
// (depths past k_end are zeroed here). Each BK slice is gathered into shared memory, As [BK][LDS_A]
// and Bs [BK][LDS_B], stored [k][row] as the math path reads it. Consecutive threads take consecutive
// depths of a column of B, and consecutive rows of A, or with A_ALONG_K consecutive depths of a row
// (whichever is contiguous in memory).
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
