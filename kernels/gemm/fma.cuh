// The GEMM family's FMA math path (math="fma"): the interface that gemm.cu.j2 declares, on CUDA
// cores in the element type (float32 or float64).

// ---- shared memory -> registers -> FMAs -----------------------------------------------------
// One operand's R values that a thread multiplies, for KC consecutive k from kk: rows t*TILE..
// of its TILE-row micro-tiles, which repeat every THR*TILE rows. From a tile stored [k][row]:
// RV-wide vectors along the rows; stored [row][k] (KMAJOR): KC-wide vectors along k.
template <bool KMAJOR, int R, int THR, int TILE, int RV, int LDS>
__device__ __forceinline__ void read_fragment(const T* __restrict__ s, int kk, int t, T (&f)[KC][R]) {
    if constexpr (KMAJOR) {
#pragma unroll
        for (int i = 0; i < R; ++i) {
            const Vec<KC> v = load_vec<KC>(
                s + ((i / TILE) * THR * TILE + t * TILE + i % TILE) * LDS + kk);
#pragma unroll
            for (int k = 0; k < KC; ++k) f[k][i] = v.v[k];
        }
    } else {
#pragma unroll
        for (int k = 0; k < KC; ++k)
#pragma unroll
            for (int i = 0; i < R; i += RV)
                store_vec<RV>(&f[k][i], load_vec<RV>(
                    s + (kk + k) * LDS + (i / TILE) * THR * TILE + t * TILE + i % TILE));
    }
}

// acc += this BK slice of op(A) tile x op(B) tile.
__device__ __forceinline__ void multiply_tiles(const T* __restrict__ as, const T* __restrict__ bs,
                                               T (&acc)[RM][RN], int tid) {
    const int ty = tid / TX, tx = tid % TX;
#pragma unroll
    for (int kk = 0; kk < BK; kk += KC) {
        T a[KC][RM], b[KC][RN];
        read_fragment<A_KMAJOR, RM, TY, TM, RVA, LDS_A>(as, kk, ty, a);
        read_fragment<B_KMAJOR, RN, TX, TN, RVB, LDS_B>(bs, kk, tx, b);
#pragma unroll
        for (int k = 0; k < KC; ++k)
#pragma unroll
            for (int i = 0; i < RM; ++i)
#pragma unroll
                for (int j = 0; j < RN; ++j) acc[i][j] = fma(a[k][i], b[k][j], acc[i][j]);
    }
}

// Row and column, in the block tile, of accumulator acc[i][j] of thread tid.
__device__ __forceinline__ int acc_row(int tid, int i) { return (i / TM) * TY * TM + (tid / TX) * TM + i % TM; }
__device__ __forceinline__ int acc_col(int tid, int j) { return (j / TN) * TX * TN + (tid % TX) * TN + j % TN; }
