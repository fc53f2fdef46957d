// Split-K across blockIdx.z (SPLIT_K slices of the reduction), deterministic: each block publishes
// its partial sums to its slice of the workspace (M x N per slice); the last block of a tile to
// arrive adds every slice in slice order into acc. Needs the math path's acc_row / acc_col.

// true for the block that now holds the tile's sums; false for the others, which have nothing left
// to do. counter: the tile's arrival count, zero before the launch and left zero after it (graph
// replays run it again).
__device__ __forceinline__ bool reduce_split_k(T (&acc)[RM][RN], T* __restrict__ workspace, int* __restrict__ counter,
                                               int m0, int n0, int M, int N, int tid) {
    T* part = workspace + (size_t)blockIdx.z * M * N;
#pragma unroll
    for (int i = 0; i < RM; ++i)
#pragma unroll
        for (int j = 0; j < RN; ++j) {
            const int m = m0 + acc_row(tid, i), n = n0 + acc_col(tid, j);
            if (m < M && n < N) __stcg(part + (size_t)m * N + n, acc[i][j]);
        }
    __threadfence();
    __syncthreads();
    __shared__ int is_last;
    if (tid == 0) {
        is_last = atomicAdd(counter, 1) == SPLIT_K - 1;
        if (is_last) *counter = 0;
    }
    __syncthreads();
    if (!is_last) return false;
    __threadfence();
#pragma unroll
    for (int i = 0; i < RM; ++i)
#pragma unroll
        for (int j = 0; j < RN; ++j) {
            const int m = m0 + acc_row(tid, i), n = n0 + acc_col(tid, j);
            if (m < M && n < N) {
                T s = T(0);
                for (int z = 0; z < SPLIT_K; ++z) s += __ldcg(workspace + ((size_t)z * M + m) * N + n);
                acc[i][j] = s;
            }
        }
    return true;
}
