// The main loop of an implicit GEMM on the FMA math path (gemm_fma.cuh, whose constants the
// template defines, with DEPTH, its K): acc = A B for the block's BM rows and BN columns, where
// a(i, kd) is A's element at the block's row i and depth kd and b(j, kd) is B's at column j: each
// gathers from memory that holds neither matrix (zero past the edges). Each BK slice is gathered
// into shared memory, As [BK][LDS_A] and Bs [BK][LDS_B], stored [k][row] as the FMA path reads it;
// consecutive threads take consecutive rows of A and consecutive depths of a column of B.
template <class GatherA, class GatherB>
__device__ __forceinline__ void multiply_implicit(GatherA a, GatherB b, T* As, T* Bs, T (&acc)[RM][RN], int tid) {
#pragma unroll
    for (int i = 0; i < RM; ++i)
#pragma unroll
        for (int j = 0; j < RN; ++j) acc[i][j] = T(0);
    for (int k0 = 0; k0 < DEPTH; k0 += BK) {
        for (int idx = tid; idx < BM * BK; idx += THREADS)
            As[(idx / BM) * LDS_A + idx % BM] = a(idx % BM, k0 + idx / BM);
        for (int idx = tid; idx < BN * BK; idx += THREADS)
            Bs[(idx % BK) * LDS_B + idx / BK] = b(idx / BK, k0 + idx % BK);
        __syncthreads();
        multiply_tiles(As, Bs, acc, tid);
        __syncthreads();
    }
}
