// Split-K across blockIdx.z (SPLIT_K slices of the reduction), deterministic: each block publishes
// its partial sums to its slice of the workspace (M x N a slice); the last block of a tile to
// arrive adds every slice in slice order into acc. The one reduction of gemm, gemm_wgmma and
// conv2d_wgrad.

// true for the block that now holds the tile's sums; false for the others, which have nothing left
// to do. acc[i][j] is the tile's element at row and column place(i, j) (an int2) of the M x N
// result; sync() is a barrier of the threads that hold the tile, and one of them is the leader.
// tile_counters[blockIdx.y gridDim.x + blockIdx.x]: the tile's arrival count, zero before the
// launch and left zero after it (graph replays run it again).
template <int ROWS, int COLS, typename Place, typename Sync>
__device__ __forceinline__ bool reduce_split_k(T (&acc)[ROWS][COLS], T* __restrict__ workspace, int* __restrict__ tile_counters,
                                               int M, int N, bool leader, Place place, Sync sync) {
    T* part = workspace + (size_t)blockIdx.z * M * N;
#pragma unroll
    for (int i = 0; i < ROWS; ++i)
#pragma unroll
        for (int j = 0; j < COLS; ++j) {
            const int2 at = place(i, j);
            if (at.x < M && at.y < N) __stcg(part + (size_t)at.x * N + at.y, acc[i][j]);
        }
    __threadfence();
    sync();
    __shared__ int is_last;
    if (leader) {
        int* counter = tile_counters + blockIdx.y * gridDim.x + blockIdx.x;
        is_last = atomicAdd(counter, 1) == SPLIT_K - 1;
        if (is_last) *counter = 0;
    }
    sync();
    if (!is_last) return false;
    __threadfence();
#pragma unroll
    for (int i = 0; i < ROWS; ++i)
#pragma unroll
        for (int j = 0; j < COLS; ++j) {
            const int2 at = place(i, j);
            if (at.x < M && at.y < N) {
                T s = T(0);
                for (int z = 0; z < SPLIT_K; ++z) s += __ldcg(workspace + ((size_t)z * M + at.x) * N + at.y);
                acc[i][j] = s;
            }
        }
    return true;
}
