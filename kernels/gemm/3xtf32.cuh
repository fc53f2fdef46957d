// The GEMM family's tensor-core math paths: the interface that gemm.cu.j2 declares, for
// math="3xtf32" and, through tf32.cuh, math="tf32".
//
// 3xTF32 on tensor cores. Each float x is split into hi = tf32(x) and the exact rest lo, and
// lo*hi + hi*lo + hi*hi is summed by mma.sync m16n8k8, 16 k at a time, into float32 accumulators:
// a warp is an 8 x 4 patch of the TY x TX threads and owns a WM x WN tile of 16 x 8 MMA tiles.
// TF32 (math="tf32"): the same fragments and tiles, each operand rounded to TF32 once and one MMA a
// k step, summed straight into the accumulators (a call at precision tf32 or bf16 allows that error).
// An includer whose tiles hold TF32 values already (rounded as stored) sets rounded_tiles.

constexpr int WARPS_M = TY / 8, WARPS_N = TX / 4;   // a warp is 8 x 4 threads of the block
constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N; // its tile: (WM/16) x (WN/8) MMA tiles
// Fragment reads as vectors. The sum over k does not care which k goes to which MMA slot, nor the
// MMA which rows of A: with both operands K-major, k slots t and t+4 of k step s read k 4t+2s and
// 4t+2s+1 (one 16-byte read serves two steps); with A stored [k][m], MMA rows g and g+8 read rows
// 2g and 2g+1 (one 8-byte read). Each tile's padding (gemm.pads) makes these reads conflict-free.
constexpr bool KVEC = A_KMAJOR && B_KMAJOR, ROW_PAIRS = !A_KMAJOR;

// ---- shared memory -> registers -> tensor cores (3xTF32) -----------------------------------
// x = hi + lo: hi is x rounded to TF32, lo the exact rest, a float whose low 13 bits the MMA
// ignores (|lo| <= 2^-11 |x|, so x is kept to about 2^-21 |x|). hi rounds as cvt.rna.tf32.f32
// does for finite x (to nearest, ties away from zero: half a TF32 unit added to the magnitude,
// then truncated), in about two fewer instructions: cvt.rna's guard for infinities is not needed
// by finite data.
__device__ __forceinline__ void split_tf32(float x, unsigned& hi, unsigned& lo) {
    hi = (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
    lo = __float_as_uint(x - __uint_as_float(hi));
}

// d (16 x 8, float32) += a (16 x 8, TF32, row-major) * b (8 x 8, TF32, column-major).
__device__ __forceinline__ void mma_tf32(float& d0, float& d1, float& d2, float& d3,
                                         const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
        "{ %0, %1, %2, %3 }, { %4, %5, %6, %7 }, { %8, %9 }, { %0, %1, %2, %3 };\n"
        : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// The raw fragments of the k steps kc and kc+8 of a warp's MMA tiles: a[s][i] = A rows g, g+8 at
// k slots t, t+4 of step s for M tile i; b[s][j] = B column g at k slots t, t+4 for N tile j.
template <int MT, int NT>
__device__ __forceinline__ void read_fragments(const T* __restrict__ as, const T* __restrict__ bs, int kc,
                                               int wm, int wn, int g, int t, float (&a)[2][MT][4], float (&b)[2][NT][2]) {
    if constexpr (KVEC) {
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const Vec<4> v = load_vec<4>(as + (wm + i * 16 + g + h * 8) * LDS_A + kc + 4 * t);
#pragma unroll
                for (int st = 0; st < 2; ++st) { a[st][i][h] = v.v[2 * st]; a[st][i][h + 2] = v.v[2 * st + 1]; }
            }
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            const Vec<4> v = load_vec<4>(bs + (wn + j * 8 + g) * LDS_B + kc + 4 * t);
#pragma unroll
            for (int st = 0; st < 2; ++st) { b[st][j][0] = v.v[2 * st]; b[st][j][1] = v.v[2 * st + 1]; }
        }
    } else {
#pragma unroll
        for (int st = 0; st < 2; ++st) {
            const int k = kc + st * 8 + t;
#pragma unroll
            for (int i = 0; i < MT; ++i)
#pragma unroll
                for (int q = 0; q < 2; ++q) {          // k slot t + 4q
                    if constexpr (ROW_PAIRS) {
                        const Vec<2> v = load_vec<2>(as + (k + 4 * q) * LDS_A + wm + i * 16 + 2 * g);
                        a[st][i][2 * q] = v.v[0];
                        a[st][i][2 * q + 1] = v.v[1];
                    } else {
                        a[st][i][2 * q] = as[(wm + i * 16 + g) * LDS_A + k + 4 * q];
                        a[st][i][2 * q + 1] = as[(wm + i * 16 + g + 8) * LDS_A + k + 4 * q];
                    }
                }
#pragma unroll
            for (int j = 0; j < NT; ++j)
#pragma unroll
                for (int q = 0; q < 2; ++q)
                    b[st][j][q] = B_KMAJOR ? bs[(wn + j * 8 + g) * LDS_B + k + 4 * q] : bs[(k + 4 * q) * LDS_B + wn + j * 8 + g];
        }
    }
}

{% if math == "tf32" %}
// x rounded to TF32 as split_tf32's hi, a NaN kept a NaN (its bits plus the rounding half could
// carry into the sign and leave a zero; 3xTF32's lo carries it instead).
__device__ __forceinline__ unsigned round_tf32(float x) {
    return x != x ? 0x7fffffffu : (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
}

{% endif %}
// acc += this BK slice of op(A) tile x op(B) tile. Lane (g, t) = (lane / 4, lane % 4) holds, of
// MMA tile (i, j): A rows g, g+8 at k slots t, t+4; B column g at k slots t, t+4; D rows g, g+8 at
// columns 2t, 2t+1, which are acc[2i][2j], acc[2i][2j+1], acc[2i+1][2j], acc[2i+1][2j+1].
//
// The tensor cores' adder truncates: summed there over all of K, each step's error leans the same
// way and grows with K times the sum. So the MMAs sum 16 k at a time from zero, and each such part
// joins acc by a rounding FADD, as an FP32 GEMM's FFMAs round: the error of FP32's dot product or
// less. The 16-k steps are not unrolled: unrolled, ptxas kept two steps' fragments and parts live.
__device__ __forceinline__ void multiply_tiles(const T* __restrict__ as, const T* __restrict__ bs,
                                               T (&acc)[RM][RN], int tid) {
    constexpr int MT = WM / 16, NT = WN / 8;
    const int lane = tid % 32, warp = tid / 32, g = lane / 4, t = lane % 4;
    const int wm = (warp / WARPS_N) * WM, wn = (warp % WARPS_N) * WN;
{% if math == "tf32" %}
#pragma unroll 1
    for (int kc = 0; kc < BK; kc += 16) {
        float a[2][MT][4], b[2][NT][2];
        read_fragments<MT, NT>(as, bs, kc, wm, wn, g, t, a, b);
        unsigned a_tf32[2][MT][4], b_tf32[2][NT][2];
#pragma unroll
        for (int st = 0; st < 2; ++st) {
#pragma unroll
            for (int i = 0; i < MT; ++i)
{% if rounded_tiles is defined %}
#pragma unroll
                for (int r = 0; r < 4; ++r) a_tf32[st][i][r] = __float_as_uint(a[st][i][r]);   // rounded as stored
#pragma unroll
            for (int j = 0; j < NT; ++j)
#pragma unroll
                for (int r = 0; r < 2; ++r) b_tf32[st][j][r] = __float_as_uint(b[st][j][r]);
{% else %}
#pragma unroll
                for (int r = 0; r < 4; ++r) a_tf32[st][i][r] = round_tf32(a[st][i][r]);
#pragma unroll
            for (int j = 0; j < NT; ++j)
#pragma unroll
                for (int r = 0; r < 2; ++r) b_tf32[st][j][r] = round_tf32(b[st][j][r]);
{% endif %}
        }
#pragma unroll
        for (int st = 0; st < 2; ++st)
#pragma unroll
            for (int i = 0; i < MT; ++i)
#pragma unroll
                for (int j = 0; j < NT; ++j)
                    mma_tf32(acc[2 * i][2 * j], acc[2 * i][2 * j + 1], acc[2 * i + 1][2 * j], acc[2 * i + 1][2 * j + 1],
                             a_tf32[st][i], b_tf32[st][j]);
    }
{% else %}
#pragma unroll 1
    for (int kc = 0; kc < BK; kc += 16) {
        float a[2][MT][4], b[2][NT][2];
        read_fragments<MT, NT>(as, bs, kc, wm, wn, g, t, a, b);
        unsigned a_hi[2][MT][4], a_lo[2][MT][4], b_hi[2][NT][2], b_lo[2][NT][2];
#pragma unroll
        for (int st = 0; st < 2; ++st) {
#pragma unroll
            for (int i = 0; i < MT; ++i)
#pragma unroll
                for (int r = 0; r < 4; ++r) split_tf32(a[st][i][r], a_hi[st][i][r], a_lo[st][i][r]);
#pragma unroll
            for (int j = 0; j < NT; ++j)
#pragma unroll
                for (int r = 0; r < 2; ++r) split_tf32(b[st][j][r], b_hi[st][j][r], b_lo[st][j][r]);
        }
#pragma unroll
        for (int i = 0; i < MT; ++i) {
            float part[NT][4] = {};
            // lo*hi, hi*lo, then hi*hi (the small terms first), each pass over the row's MMA
            // tiles: an MMA never waits on the one just before it.
#pragma unroll
            for (int st = 0; st < 2; ++st)
#pragma unroll
                for (int pass = 0; pass < 3; ++pass)
#pragma unroll
                    for (int j = 0; j < NT; ++j)
                        mma_tf32(part[j][0], part[j][1], part[j][2], part[j][3],
                                 pass == 0 ? a_lo[st][i] : a_hi[st][i], pass == 1 ? b_lo[st][j] : b_hi[st][j]);
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                acc[2 * i][2 * j] += part[j][0];
                acc[2 * i][2 * j + 1] += part[j][1];
                acc[2 * i + 1][2 * j] += part[j][2];
                acc[2 * i + 1][2 * j + 1] += part[j][3];
            }
        }
    }
{% endif %}
}

// Row and column, in the block tile, of accumulator acc[i][j] of thread tid.
__device__ __forceinline__ int acc_row(int tid, int i) {
    const int g = tid % 32 / 4;
    return (tid / 32 / WARPS_N) * WM + (i / 2) * 16 + (ROW_PAIRS ? 2 * g + i % 2 : g + (i % 2) * 8);
}
__device__ __forceinline__ int acc_col(int tid, int j) {
    return (tid / 32 % WARPS_N) * WN + (j / 2) * 8 + (tid % 4) * 2 + j % 2;
}
