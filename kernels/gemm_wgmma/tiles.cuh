// gemm_wgmma.cu.j2's operand tiles: copied from global into shared memory (cp.async or bulk tensor
// copies), then prepared for the wgmmas (transposed K-major, split into hi and lo, or rounded to bfloat16).

// ---- global memory -> shared memory ---------------------------------------------------------
// A ROWS x BK tile of operand X (rows row0.., k k0..) into `tile`, 16 bytes a copy by each of the
// LOADERS threads (`loader`: this one's index among them) in turn, as it lies in
// global memory: K-major (X[row][k]) into swizzled rows, M/N-major (X[k][row], MN) into
// BK plain rows of ROWS elements, [k][row], or as landed_mn places them (SWIZZLED: bfloat16
// operands, a float32 A read into registers). Rows past `rows` and k past K are zero-filled
// (cp.async's source size).
template <int ROWS, bool MN, bool SWIZZLED>
__device__ __forceinline__ void load_tile(unsigned char* tile, const TIn* __restrict__ X, int ld, int row0, int rows,
                                          int k0, int K, int loader) {
    constexpr int CHUNKS = ROWS * BK / PER_COPY, E = sizeof(TIn);
#pragma unroll
    for (int it = 0; it < ceil_div(CHUNKS, LOADERS); ++it) {
        const int idx = loader + it * LOADERS;
        if (CHUNKS % LOADERS == 0 || idx < CHUNKS) {
            if constexpr (MN) {
                const int k = idx / (ROWS / PER_COPY), r = PER_COPY * (idx % (ROWS / PER_COPY));
                const bool inside = k0 + k < K && row0 + r < rows;
                const int bytes = inside ? E * (rows - row0 - r < PER_COPY ? rows - row0 - r : PER_COPY) : 0;
                cp_async16(tile + (SWIZZLED ? landed_mn(k, r) : (k * ROWS + r) * E),
                           inside ? X + (size_t)(k0 + k) * ld + row0 + r : X, bytes);
            } else {
                const int r = idx / (BK / PER_COPY), c = idx % (BK / PER_COPY), k = k0 + PER_COPY * c;
                const bool inside = row0 + r < rows && k < K;
                const int bytes = inside ? E * (K - k < PER_COPY ? K - k : PER_COPY) : 0;
                cp_async16(tile + swizzled(r, c), inside ? X + (size_t)(row0 + r) * ld + k : X, bytes);
            }
        }
    }
}

// Part `part` of PARTS of the same tile by bulk tensor copies (TMA) through X's map
// (kernels/gemm_wgmma/, tile_maps), onto `bar`, multicast to the cluster's `blocks` when shared
// (PARTS > 1): K-major, one box of BK k by ROWS/PARTS rows; M/N-major, one of ROWS by BK/PARTS
// k-rows, or where landed_mn places it (SWIZZLED), a box of MN_ROWS rows by BK/PARTS k-rows a block.
template <int ROWS, bool MN, bool SWIZZLED, int PARTS>
__device__ __forceinline__ void copy_tile(unsigned char* tile, const TensorMap& map, int row0, int k0,
                                          unsigned long long* bar, int part, unsigned short blocks) {
    auto copy = [&](unsigned char* dst, int c0, int c1) {
        if constexpr (PARTS == 1) tma_load(dst, map, c0, c1, bar);
        else tma_multicast(dst, map, c0, c1, bar, blocks);
    };
    constexpr int PART_ROWS = ROWS / PARTS, PART_K = BK / PARTS;
    if constexpr (!MN) {
        copy(tile + part * PART_ROWS * ROW_BYTES, k0, row0 + part * PART_ROWS);
    } else if constexpr (!SWIZZLED) {
        copy(tile + part * PART_K * ROWS * sizeof(TIn), row0, k0 + part * PART_K);
    } else {
#pragma unroll
        for (int b = 0; b < ROWS / MN_ROWS; ++b)
            copy(tile + b * MN_BLOCK + part * PART_K * 128, row0 + MN_ROWS * b, k0 + part * PART_K);
    }
}

// ---- a landed tile -> what the wgmmas read ----------------------------------------------------
// The exact rest of x below its TF32 value: x = hi + lo, where hi is what the MMA reads of x itself
// (its top 19 bits: the tensor cores ignore the low 13). The MMA ignores lo's low 13 bits too:
// |lo| < 2^-10 |x|, so x is kept to about 2^-20 |x|.
__device__ __forceinline__ T tf32_rest(T x) { return x - __uint_as_float(__float_as_uint(x) & 0xffffe000u); }

// One operand's ROWS x 32 tile as landed in `tile` into the K-major swizzled layout the wgmmas read:
// an M/N-major tile is transposed into `hi` (16 bytes of k a thread; consecutive threads take
// consecutive rows, so the reads are along rows and each 8 writes cover every bank) and, under
// 3xTF32, its lo into `lo`; a K-major tile is its own hi, and under 3xTF32 its lo is written at the
// same offsets (the layout does not matter to an elementwise split).
template <int ROWS, bool MN>
__device__ __forceinline__ void prepare_tile(const unsigned char* tile, unsigned char* hi, unsigned char* lo, int loader) {
    const T* x = reinterpret_cast<const T*>(tile);
#pragma unroll 4
    for (int i = loader; i < ROWS * 8; i += LOADERS) {
        Vec<4> v;
        int at;                      // the byte offset of these 4 floats in the prepared tiles
        if constexpr (MN) {
            const int r = i % ROWS, c = i / ROWS;
#pragma unroll
            for (int e = 0; e < 4; ++e) v.v[e] = x[(4 * c + e) * ROWS + r];
            at = swizzled(r, c);
            store_vec<4>(reinterpret_cast<T*>(hi + at), v);
        } else {
            v = load_vec<4>(x + 4 * i);
            at = 16 * i;
        }
        if constexpr (PASSES == 3) {
#pragma unroll
            for (int e = 0; e < 4; ++e) v.v[e] = tf32_rest(v.v[e]);
            store_vec<4>(reinterpret_cast<T*>(lo + at), v);
        }
    }
}

// One operand's ROWS x 32 float32 tile as landed in `tile` rounded into bfloat16 in `out`, K-major,
// 64-byte rows in the 64-byte swizzle; 8 k of a row a thread (one 16-byte chunk out), consecutive
// threads on consecutive rows, so that reads along rows and each 8 writes are free of bank conflicts.
template <int ROWS, bool MN>
__device__ __forceinline__ void prepare_bf16(const unsigned char* tile, unsigned char* out, int loader) {
    const T* x = reinterpret_cast<const T*>(tile);
#pragma unroll 4
    for (int i = loader; i < ROWS * 4; i += LOADERS) {
        const int r = i % ROWS, c = i / ROWS;    // row, chunk of 8 k
        float v[8];
        if constexpr (MN) {
#pragma unroll
            for (int e = 0; e < 8; ++e) v[e] = x[(8 * c + e) * ROWS + r];
        } else {
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const Vec<4> four = load_vec<4>(reinterpret_cast<const T*>(tile + swizzled(r, 2 * c + half)));
#pragma unroll
                for (int e = 0; e < 4; ++e) v[4 * half + e] = four.v[e];
            }
        }
        Vec<4> packed;                           // 8 bfloat16, two a word
#pragma unroll
        for (int e = 0; e < 4; ++e) packed.v[e] = __uint_as_float(bf16x2(v[2 * e], v[2 * e + 1]));
        store_vec<4>(reinterpret_cast<T*>(out + swizzled64(r, c)), packed);
    }
}

// ---- a landed tile -> registers (REG_A) ---------------------------------------------------------
// Lane group g (lane / 4) of warp w feeds, of each wgmma tile mt, its A rows g and g + 8 (the
// warp's rows 16w + g + 8h): slots s = 2 mt + h. Which row of the warpgroup's 64 M_TILES fills a
// slot is free (its accumulators then hold that row of D), so each lane takes whole 16-byte chunks
// of the landed tile's 128-byte k-rows (32 rows each, landed_mn), 4 rows each (or 2 under one wgmma
// tile), chunk indices chosen so that the lanes of one read, on 4 k-rows (q = lane % 4) that the
// swizzle shifts apart, meet every bank once: where lanes g and g + 1 read together, their chunks
// differ by 4.
__device__ __forceinline__ int reg_a_row(int w, int g, int s) {
    if constexpr (M_TILES == 1)    // 16 rows a warp, 2 a lane: half of a 32-row block, 8 bytes a read
        return 32 * (w / 2) + 4 * (2 * (w % 2) + g / 4 + 4 * (g % 2)) + 2 * (g / 2 % 2) + s;
    else                           // 4 rows a lane of each of the warp's M_TILES / 2 blocks of 32
        return 32 * (w * M_TILES / 2 + s / 4) + 4 * (g / 2 + 4 * (g % 2)) + s % 4;
}
static_assert(!REG_A || M_TILES == 1 || M_TILES % 2 == 0, "register A fragments: one wgmma tile a warpgroup, or an even number");

// This thread's (t: its index in its warpgroup) A fragments of k8 step kk of a landed stage (its A
// tile first, in landed_mn's layout), its warpgroup's rows from `first_row` of the block tile:
// x[mt] = A at slots 2mt, 2mt + 1, k q, then at k q + 4 (q = t % 4: the mma.sync A fragment).
__device__ __forceinline__ void a_fragments(const unsigned char* stage, int first_row, int kk, int t,
                                            float (&x)[M_TILES][4]) {
    const int w = t / 32, g = t % 32 / 4, q = t % 4;
#pragma unroll
    for (int kq = 0; kq < 2; ++kq) {
        const int k = 8 * kk + q + 4 * kq;
        if constexpr (M_TILES == 1) {
            const Vec<2> v = load_vec<2>(reinterpret_cast<const T*>(stage + landed_mn(k, first_row + reg_a_row(w, g, 0))));
            x[0][2 * kq] = v.v[0];
            x[0][2 * kq + 1] = v.v[1];
        } else {
#pragma unroll
            for (int b = 0; b < M_TILES / 2; ++b) {
                const Vec<4> v = load_vec<4>(reinterpret_cast<const T*>(stage + landed_mn(k, first_row + reg_a_row(w, g, 4 * b))));
#pragma unroll
                for (int e = 0; e < 4; ++e) x[2 * b + e / 2][e % 2 + 2 * kq] = v.v[e];
            }
        }
    }
}
