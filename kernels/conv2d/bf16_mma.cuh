// The implicit GEMMs' BF16 math path (math="bf16", calls at precision bf16): mma.sync m16n8k16 on
// bfloat16 operands, summed in float32 straight into the accumulators. The gather rounds each
// float32 element to bfloat16 once, as it stores it (store_tile), into tiles of k pairs: word
// [k/2][row] holds the row's elements at k and k+1 (the even one in the low half), so that each
// fragment register is one 32-bit read. The words fill the first half of the [k][row] float tiles
// of the other maths (one layout and size of shared memory for every math).
// A warp is an 8 x 4 patch of the TY x TX threads and owns a WM x WN tile of 16 x 8 MMA tiles; MMA
// rows g and g+8 are the tile's rows 2g and 2g+1 (one 8-byte read for both), as in 3xtf32.cuh.
{% include "bf16.cuh" %}

constexpr int WARPS_M = TY / 8, WARPS_N = TX / 4;   // a warp is 8 x 4 threads of the block
constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N; // its tile: (WM/16) x (WN/8) MMA tiles

// d (16 x 8, float32) += a (16 x 16, bfloat16, row-major) * b (16 x 8, bfloat16, column-major).
__device__ __forceinline__ void mma_bf16(float& d0, float& d1, float& d2, float& d3,
                                         const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{ %0, %1, %2, %3 }, { %4, %5, %6, %7 }, { %8, %9 }, { %0, %1, %2, %3 };\n"
        : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Stores x, element (k, row) of a tile of leading dimension ld (words), rounded to bfloat16 into
// its k pair's word. (Through bf16.cuh's store_bf16<1> ptxas made the forward's main loop 161
// instructions, not 145: benchmarks/sass_loop.py.)
__device__ __forceinline__ void store_tile(T* tile, int ld, int k, int row, T x) {
    reinterpret_cast<unsigned short*>(tile)[((k >> 1) * ld + row) * 2 + (k & 1)] = bf16x2(x, 0.0f) & 0xffffu;
}

// acc += this BK slice of the A tile x B tile. Lane (g, t) = (lane / 4, lane % 4) holds, of MMA tile
// (i, j): A rows g, g+8 (the tile's 2g, 2g+1) at k pairs t, t+4 of the 16-k step; B column g at
// them; D rows g, g+8 at columns 2t, 2t+1: acc[2i][2j], acc[2i][2j+1], acc[2i+1][2j], acc[2i+1][2j+1].
__device__ __forceinline__ void multiply_tiles(const T* __restrict__ as, const T* __restrict__ bs,
                                               T (&acc)[RM][RN], int tid) {
    constexpr int MT = WM / 16, NT = WN / 8;
    const int lane = tid % 32, warp = tid / 32, g = lane / 4, t = lane % 4;
    const int wm = (warp / WARPS_N) * WM, wn = (warp % WARPS_N) * WN;
    const unsigned* a_words = reinterpret_cast<const unsigned*>(as);
    const unsigned* b_words = reinterpret_cast<const unsigned*>(bs);
#pragma unroll 1                            // one step's fragments live at a time, as in 3xtf32.cuh
    for (int kc = 0; kc < BK; kc += 16) {
        const int p0 = kc / 2 + t, p1 = p0 + 4;     // the pairs (2t, 2t+1) and (2t+8, 2t+9) of the step
        unsigned a[MT][4], b[NT][2];
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
            for (int q = 0; q < 2; ++q) {           // pair p0, then p1: rows 2g and 2g+1 in one read
                const unsigned* pair = a_words + (q ? p1 : p0) * LDS_A + wm + i * 16 + 2 * g;
                const Vec<2> v = load_vec<2>(reinterpret_cast<const T*>(pair));
                a[i][2 * q] = __float_as_uint(v.v[0]);
                a[i][2 * q + 1] = __float_as_uint(v.v[1]);
            }
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            b[j][0] = b_words[p0 * LDS_B + wn + j * 8 + g];
            b[j][1] = b_words[p1 * LDS_B + wn + j * 8 + g];
        }
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
            for (int j = 0; j < NT; ++j)
                mma_bf16(acc[2 * i][2 * j], acc[2 * i][2 * j + 1], acc[2 * i + 1][2 * j], acc[2 * i + 1][2 * j + 1],
                         a[i], b[j]);
    }
}

// Row and column, in the block tile, of accumulator acc[i][j] of thread tid.
__device__ __forceinline__ int acc_row(int tid, int i) {
    return (tid / 32 / WARPS_N) * WM + (i / 2) * 16 + 2 * (tid % 32 / 4) + i % 2;
}
__device__ __forceinline__ int acc_col(int tid, int j) {
    return (tid / 32 % WARPS_N) * WN + (j / 2) * 8 + (tid % 4) * 2 + j % 2;
}
