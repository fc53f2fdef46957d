// bfloat16 bits in and out of float32, one definition for every template that reads or writes them:
// rounding to nearest even (NaN stays NaN), widening exactly. Plain CUDA, included after common.cuh
// (Vec, load_vec, store_vec); store_bf16 and load_values of bfloat16 are for T float (a float64
// instance includes them and never calls them).

// Two floats rounded to bfloat16, packed: `lo` in the low half (the lower address).
__device__ __forceinline__ unsigned bf16x2(float lo, float hi) {
    unsigned packed;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(packed) : "f"(hi), "f"(lo));
    return packed;
}

// V floats rounded to bfloat16 into `out` (2 * V bytes, one store: bfloat16 pairs as float words).
template <int V>
__device__ __forceinline__ void store_bf16(unsigned short* out, const Vec<V>& x) {
    if constexpr (V == 1) {
        *out = bf16x2(x.v[0], 0.0f) & 0xffffu;
    } else {
        Vec<V / 2> words;
#pragma unroll
        for (int i = 0; i < V / 2; ++i) words.v[i] = __uint_as_float(bf16x2(x.v[2 * i], x.v[2 * i + 1]));
        store_vec<V / 2>(reinterpret_cast<T*>(out), words);
    }
}

// V values of T from `in` in one load: as they are.
template <int V>
__device__ __forceinline__ Vec<V> load_values(const T* in) { return load_vec<V>(in); }

// V values from bfloat16 bits at `in` (2 * V bytes, one load), widened to float32.
template <int V>
__device__ __forceinline__ Vec<V> load_values(const unsigned short* in) {
    Vec<V> x;
    if constexpr (V == 1) {
        x.v[0] = __uint_as_float((unsigned)*in << 16);
    } else {
        const Vec<V / 2> words = load_vec<V / 2>(reinterpret_cast<const T*>(in));
#pragma unroll
        for (int i = 0; i < V / 2; ++i) {
            const unsigned pair = __float_as_uint(words.v[i]);
            x.v[2 * i] = __uint_as_float(pair << 16);
            x.v[2 * i + 1] = __uint_as_float(pair & 0xffff0000u);
        }
    }
    return x;
}
