// The GEMM family's tensor-core math paths: the interface that gemm.cu.j2 declares, for
// math="3xtf32" and, through tf32.cuh, math="tf32".
//
// 3xTF32 on tensor cores. Each float x is split into hi = tf32(x) and the exact rest lo, and
// lo*hi + hi*lo + hi*hi is summed by mma.sync m16n8k8, 16 k at a time, into float32 accumulators:
// a warp is an 8 x 4 patch of the TY x TX threads and owns a WM x WN tile of 16 x 8 MMA tiles.
// TF32 (math="tf32"): the same fragments and tiles, one MMA a k step on each float's top 19 bits,
// summed straight into the accumulators (a call at precision tf32 or bf16 allows that error).

constexpr int WARPS_M = TY / 8, WARPS_N = TX / 4;   // a warp is 8 x 4 threads of the block
constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N; // its tile: MT x NT MMA tiles of 16 x 8
constexpr int MT = WM / 16, NT = WN / 8;
// Fragment slots. Lane (g, t) = (lane / 4, lane % 4) feeds, of MMA tile i, A's rows in slots g and
// g + 8 (its rows q = 2i and 2i + 1 of 2 MT), and of N tile j, B's column in slot g. The sum does
// not care which row or column fills a slot, so where an operand's rows are contiguous in shared
// memory ([k][row]) each lane takes V adjacent ones and reads them as one vector: its q-th row is
// slot_row(V, g, q), the V-row groups of a warp's 8 lanes side by side (a [k][row] tile's rows
// 8 or 24 (mod 32) words long, gemm.pads, then put the 4 k of t on distinct banks). A K-major
// operand ([row][k]) keeps the plain order (V = 1: rows g and g + 8 of each tile) and is read by
// ldmatrix, each of its 8 x 4 blocks of float32 as an 8 x 8 matrix of 16-bit halves (rows 4 (mod 8)
// words long: 8 rows on distinct banks).
constexpr int VA = A_KMAJOR ? 1 : (MT % 2 == 0 ? 4 : 2);
constexpr int VB = B_KMAJOR ? 1 : (NT % 4 == 0 ? 4 : NT % 2 == 0 ? 2 : 1);
__host__ __device__ constexpr int slot_row(int v, int g, int q) { return 8 * v * (q / v) + v * g + q % v; }
// Where D's column pair (2t, 2t + 1) of N tile j sits among a thread's accumulators: adjacent
// columns in adjacent ones (B's slots 2t and 2t + 1 hold columns V apart), so that they store as a vector.
__host__ __device__ constexpr int acc_slot(int j, int e) { return 2 * VB * (j / VB) + VB * e + j % VB; }

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

// X 8 x 8 matrices of 16-bit elements from shared memory (here 8 x 4 float32 each): lane 8m + r
// names row r of matrix m (16 bytes); lane (g, t) receives word t of row g of matrix m in r[m].
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const T* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 { %0, %1, %2, %3 }, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(static_cast<unsigned>(__cvta_generic_to_shared(row))));
}
__device__ __forceinline__ void ldmatrix_x2(unsigned (&r)[2], const T* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 { %0, %1 }, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1]) : "r"(static_cast<unsigned>(__cvta_generic_to_shared(row))));
}

// The raw fragments (float32 bits) of the k8 step at k of a warp's MMA tiles: a[i] = A's rows of
// tile i at k slots t, t+4 (a0-a3: slots g, g+8 at t; g, g+8 at t+4); b[j] = B's column of tile j
// at k slots t, t+4.
__device__ __forceinline__ void read_step(const T* __restrict__ as, const T* __restrict__ bs, int k, int wm, int wn,
                                          int lane, unsigned (&a)[MT][4], unsigned (&b)[NT][2]) {
    const int g = lane / 4, t = lane % 4, m = lane / 8, r = lane % 8;   // (m, r): ldmatrix's matrix and row
    if constexpr (A_KMAJOR) {      // matrices: rows 0-7 and 8-15 of the tile at k 0-3, then at k 4-7
#pragma unroll
        for (int i = 0; i < MT; ++i) ldmatrix_x4(a[i], as + (wm + 16 * i + 8 * (m % 2) + r) * LDS_A + k + 4 * (m / 2));
    } else {
#pragma unroll
        for (int kq = 0; kq < 2; ++kq)
#pragma unroll
            for (int c = 0; c < 2 * MT / VA; ++c) {
                const Vec<VA> v = load_vec<VA>(as + (k + t + 4 * kq) * LDS_A + wm + slot_row(VA, g, VA * c));
#pragma unroll
                for (int e = 0; e < VA; ++e) a[(VA * c + e) / 2][(VA * c + e) % 2 + 2 * kq] = __float_as_uint(v.v[e]);
            }
    }
    if constexpr (B_KMAJOR) {      // matrices: tile j's columns at k 0-3, at k 4-7, then tile j + 1's
#pragma unroll
        for (int j = 0; j + 1 < NT; j += 2) {
            unsigned x[4];
            ldmatrix_x4(x, bs + (wn + 8 * (j + m / 2) + r) * LDS_B + k + 4 * (m % 2));
            b[j][0] = x[0], b[j][1] = x[1], b[j + 1][0] = x[2], b[j + 1][1] = x[3];
        }
        if constexpr (NT % 2 == 1) ldmatrix_x2(b[NT - 1], bs + (wn + 8 * (NT - 1) + r) * LDS_B + k + 4 * (m % 2));
    } else {
#pragma unroll
        for (int kq = 0; kq < 2; ++kq)
#pragma unroll
            for (int c = 0; c < NT / VB; ++c) {
                const Vec<VB> v = load_vec<VB>(bs + (k + t + 4 * kq) * LDS_B + wn + slot_row(VB, g, VB * c));
#pragma unroll
                for (int e = 0; e < VB; ++e) b[VB * c + e][kq] = __float_as_uint(v.v[e]);
            }
    }
}

// acc += this BK slice of op(A) tile x op(B) tile. Lane (g, t) holds, of MMA tile (i, j), D's rows
// in slots g, g+8 at columns 2t, 2t+1: acc[2i][acc_slot(j, 0)], acc[2i][acc_slot(j, 1)],
// acc[2i+1][acc_slot(j, 0)], acc[2i+1][acc_slot(j, 1)] (acc_row and acc_col say where they go).
{% if math == "tf32" %}
// TF32: the fragments as read, one MMA each k8 step (the tensor cores read each float's top 19 bits:
// truncated to TF32), the whole BK slice unrolled so that the next step's reads overlap these MMAs.
__device__ __forceinline__ void multiply_tiles(const T* __restrict__ as, const T* __restrict__ bs,
                                               T (&acc)[RM][RN], int tid) {
    const int lane = tid % 32, warp = tid / 32;
    const int wm = (warp / WARPS_N) * WM, wn = (warp % WARPS_N) * WN;
#pragma unroll
    for (int k = 0; k < BK; k += 8) {
        unsigned a[MT][4], b[NT][2];
        read_step(as, bs, k, wm, wn, lane, a, b);
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
            for (int j = 0; j < NT; ++j)
                mma_tf32(acc[2 * i][acc_slot(j, 0)], acc[2 * i][acc_slot(j, 1)], acc[2 * i + 1][acc_slot(j, 0)],
                         acc[2 * i + 1][acc_slot(j, 1)], a[i], b[j]);
    }
}
{% else %}
// 3xTF32. The tensor cores' adder truncates: summed there over all of K, each step's error leans
// the same way and grows with K times the sum. So the MMAs sum 16 k at a time from zero, and each
// such part joins acc by a rounding FADD, as an FP32 GEMM's FFMAs round: the error of FP32's dot
// product or less. The 16-k steps are not unrolled: unrolled, ptxas kept two steps' fragments and
// parts live.
__device__ __forceinline__ void multiply_tiles(const T* __restrict__ as, const T* __restrict__ bs,
                                               T (&acc)[RM][RN], int tid) {
    const int lane = tid % 32, warp = tid / 32;
    const int wm = (warp / WARPS_N) * WM, wn = (warp % WARPS_N) * WN;
#pragma unroll 1
    for (int kc = 0; kc < BK; kc += 16) {
        unsigned a[2][MT][4], b[2][NT][2];
#pragma unroll
        for (int st = 0; st < 2; ++st) read_step(as, bs, kc + 8 * st, wm, wn, lane, a[st], b[st]);
        unsigned a_hi[2][MT][4], a_lo[2][MT][4], b_hi[2][NT][2], b_lo[2][NT][2];
#pragma unroll
        for (int st = 0; st < 2; ++st) {
#pragma unroll
            for (int i = 0; i < MT; ++i)
#pragma unroll
                for (int r = 0; r < 4; ++r) split_tf32(__uint_as_float(a[st][i][r]), a_hi[st][i][r], a_lo[st][i][r]);
#pragma unroll
            for (int j = 0; j < NT; ++j)
#pragma unroll
                for (int r = 0; r < 2; ++r) split_tf32(__uint_as_float(b[st][j][r]), b_hi[st][j][r], b_lo[st][j][r]);
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
                acc[2 * i][acc_slot(j, 0)] += part[j][0];
                acc[2 * i][acc_slot(j, 1)] += part[j][1];
                acc[2 * i + 1][acc_slot(j, 0)] += part[j][2];
                acc[2 * i + 1][acc_slot(j, 1)] += part[j][3];
            }
        }
    }
}
{% endif %}

// Row and column, in the block tile, of accumulator acc[i][j] of thread tid: A's row slot_row(VA,
// g, i) of the warp tile; the column of B's slot 2t + e in N tile jt, where acc_slot(jt, e) = j.
__device__ __forceinline__ int acc_row(int tid, int i) {
    return (tid / 32 / WARPS_N) * WM + slot_row(VA, tid % 32 / 4, i);
}
__device__ __forceinline__ int acc_col(int tid, int j) {
    const int jt = VB * (j / (2 * VB)) + j % VB, e = j % (2 * VB) / VB;
    return (tid / 32 % WARPS_N) * WN + slot_row(VB, 2 * (tid % 4) + e, jt);
}
