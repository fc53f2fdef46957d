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
// slice. The second stage's tiles follow the first's: [As][Bs][As'][Bs'], then the depth tables.
// Each operand is gathered through an object (the template's) with a row state, decoded once per
// thread (row(i), fixed across slices), a depth state (depth(kd)), and at(row, depth), the element
// (zero past the operand's rows). Where the block's threads are a multiple of BM (of BK along K) a
// thread's elements share their row (depth), decoded once. An operand whose depth state costs
// divisions (TABULATED, where the table fits: conv2d.MAX_TABLE_BYTES) has it decoded once a block
// for every depth of [k_begin, k_end), into a table in shared memory that each gather reads.
// Under TF32 each element is rounded as it is stored, once, not at each fragment read (the MMAs
// take the tiles' bits as they are: rounded_tiles); under BF16 rounded to bfloat16 and stored in k
// pairs (bf16_mma.cuh's store_tile).

constexpr int A_LOADS = (BM * BK + THREADS - 1) / THREADS, B_LOADS = (BN * BK + THREADS - 1) / THREADS;
constexpr int STAGE_ELEMS = BK * (LDS_A + LDS_B);

// Row and depth, in the tile, of a thread's load l of a ROWS x BK tile: consecutive threads along the
// rows, or with ALONG_K along the depths.
template <bool ALONG_K, int ROWS>
__device__ __forceinline__ int load_row(int tid, int l) {
    if constexpr (ALONG_K)
        return THREADS % BK == 0 ? tid / BK + l * (THREADS / BK) : (tid + l * THREADS) / BK;
    else
        return THREADS % ROWS == 0 ? tid % ROWS : (tid + l * THREADS) % ROWS;
}
template <bool ALONG_K, int ROWS>
__device__ __forceinline__ int load_depth(int tid, int l) {
    if constexpr (ALONG_K)
        return THREADS % BK == 0 ? tid % BK : (tid + l * THREADS) % BK;
    else
        return THREADS % ROWS == 0 ? tid / ROWS + l * (THREADS / ROWS) : (tid + l * THREADS) / ROWS;
}

// An operand's depth states for [k_begin, k_end): read from its table where TABULATED, else decoded.
template <class Operand>
struct DepthStates {
    const Operand& op;
    const typename Operand::Depth* table;   // table[kd - k_begin]
    int k_begin;
    __device__ __forceinline__ typename Operand::Depth operator()(int kd) const {
        if constexpr (Operand::TABULATED) return table[kd - k_begin];
        else return op.depth(kd);
    }
};

// Fills `table` with op's depth states for [k_begin, k_end) (a barrier must follow before it is read);
// returns the end of its bytes.
template <class Operand>
__device__ __forceinline__ unsigned char* tabulate(const Operand& op, typename Operand::Depth* table, int k_begin,
                                                   int k_end, int tid) {
    if constexpr (!Operand::TABULATED) return reinterpret_cast<unsigned char*>(table);
    for (int kd = k_begin + tid; kd < k_end; kd += THREADS) table[kd - k_begin] = op.depth(kd);
    return reinterpret_cast<unsigned char*>(table + (k_end - k_begin));
}

// WHOLE_SLICES: k_end - k_begin is a multiple of BK (no depth of a slice to zero).
template <bool A_ALONG_K, bool WHOLE_SLICES, class OperandA, class OperandB>
__device__ __forceinline__ void multiply_implicit(const OperandA& a, const OperandB& b, int k_begin, int k_end,
                                                  T* As, T* Bs, T (&acc)[RM][RN], int tid) {
#pragma unroll
    for (int i = 0; i < RM; ++i)
#pragma unroll
        for (int j = 0; j < RN; ++j) acc[i][j] = T(0);
    // The depth tables, A's then B's (the larger state first, for alignment), after the two stages.
    auto* a_table = reinterpret_cast<typename OperandA::Depth*>(As + 2 * STAGE_ELEMS);
    auto* b_table = reinterpret_cast<typename OperandB::Depth*>(tabulate(a, a_table, k_begin, k_end, tid));
    tabulate(b, b_table, k_begin, k_end, tid);
    if constexpr (OperandA::TABULATED || OperandB::TABULATED) __syncthreads();
    const DepthStates<OperandA> a_depth{a, a_table, k_begin};
    const DepthStates<OperandB> b_depth{b, b_table, k_begin};

    auto in_tile = [&](int l, int size) { return size % THREADS == 0 || tid + l * THREADS < size; };
    auto in_depth = [&](int kd) { return WHOLE_SLICES || kd < k_end; };
    typename OperandA::Row a_rows[A_LOADS];
    typename OperandB::Row b_rows[B_LOADS];
#pragma unroll
    for (int l = 0; l < A_LOADS; ++l) a_rows[l] = a.row(load_row<A_ALONG_K, BM>(tid, l));
#pragma unroll
    for (int l = 0; l < B_LOADS; ++l) b_rows[l] = b.row(load_row<true, BN>(tid, l));
    T ra[A_LOADS], rb[B_LOADS];
    auto gather = [&](int k0) {
#pragma unroll
        for (int l = 0; l < A_LOADS; ++l) {
            const int kd = k0 + load_depth<A_ALONG_K, BM>(tid, l);
            ra[l] = in_tile(l, BM * BK) && in_depth(kd) ? a.at(a_rows[l], a_depth(kd)) : T(0);
        }
#pragma unroll
        for (int l = 0; l < B_LOADS; ++l) {
            const int kd = k0 + load_depth<true, BN>(tid, l);
            rb[l] = in_tile(l, BN * BK) && in_depth(kd) ? b.at(b_rows[l], b_depth(kd)) : T(0);
        }
    };
{% if math == "bf16" %}
    auto put = [&](T* as, T* bs) {        // bfloat16 pairs (bf16_mma.cuh)
#pragma unroll
        for (int l = 0; l < A_LOADS; ++l)
            if (in_tile(l, BM * BK))
                store_tile(as, LDS_A, load_depth<A_ALONG_K, BM>(tid, l), load_row<A_ALONG_K, BM>(tid, l), ra[l]);
#pragma unroll
        for (int l = 0; l < B_LOADS; ++l)
            if (in_tile(l, BN * BK))
                store_tile(bs, LDS_B, load_depth<true, BN>(tid, l), load_row<true, BN>(tid, l), rb[l]);
    };
{% else %}
{% if math == "tf32" %}
    auto stored = [](T x) { return __uint_as_float(round_tf32(x)); };
{% else %}
    auto stored = [](T x) { return x; };
{% endif %}
    auto put = [&](T* as, T* bs) {
#pragma unroll
        for (int l = 0; l < A_LOADS; ++l)
            if (in_tile(l, BM * BK))
                as[load_depth<A_ALONG_K, BM>(tid, l) * LDS_A + load_row<A_ALONG_K, BM>(tid, l)] = stored(ra[l]);
#pragma unroll
        for (int l = 0; l < B_LOADS; ++l)
            if (in_tile(l, BN * BK))
                bs[load_depth<true, BN>(tid, l) * LDS_B + load_row<true, BN>(tid, l)] = stored(rb[l]);
    };
{% endif %}
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
