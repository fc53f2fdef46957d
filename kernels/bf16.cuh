// Rounding float32 to bfloat16 (to nearest even; NaN stays NaN), one definition for every template
// that writes bfloat16 bits. Plain CUDA, included after common.cuh (Vec, store_vec); store_bf16 is
// for T float (a float64 instance includes it and never calls it).

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
