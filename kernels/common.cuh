// What every autogemm kernel uses, one definition each: vector types and their loads and stores,
// ceil_div, and the pointwise operations of a layer (activations and their derivatives).
// Plain CUDA, included by the templates that use it, after their preamble has defined T, the element type.

// ---- vectors ----------------------------------------------------------------------------------
// N elements of T as one aligned load or store (N * sizeof(T) <= 16 bytes).
template <int N>
struct alignas(N * sizeof(T)) Vec { T v[N]; };

template <int N>
__device__ __forceinline__ Vec<N> load_vec(const T* p) { return *reinterpret_cast<const Vec<N>*>(p); }

template <int N>
__device__ __forceinline__ void store_vec(T* p, const Vec<N>& x) { *reinterpret_cast<Vec<N>*>(p) = x; }

__host__ __device__ constexpr int ceil_div(int a, int b) { return (a + b - 1) / b; }

// ---- pointwise operations ---------------------------------------------------------------------
// The pointwise operations of a layer: fused into a GEMM's epilogue, or run alone by the
// elementwise family (which adds the SGD update).
enum class Pointwise { none, bias, bias_sigmoid, bias_relu, dsigmoid, drelu, sgd };

__host__ __device__ constexpr bool adds_bias(Pointwise op) {
    return op == Pointwise::bias || op == Pointwise::bias_sigmoid || op == Pointwise::bias_relu;
}

__device__ __forceinline__ T sigmoid(T x) {
    if constexpr (sizeof(T) == 4)
        return __fdividef(1.0f, 1.0f + expf(-x));   // 2 ulp, and no slow path for an infinite exp, which IEEE division takes
    else
        return T(1) / (T(1) + exp(-x));
}

__device__ __forceinline__ T relu(T x) { return x > T(0) ? x : T(0); }

// g * f'(z) from y = f(z), the saved output of the activation f.
__device__ __forceinline__ T sigmoid_grad(T g, T y) { return g * (y * (T(1) - y)); }
__device__ __forceinline__ T relu_grad(T g, T y) { return y > T(0) ? g : T(0); }

// The activation of op applied to v, which already includes the bias where op adds one.
template <Pointwise OP>
__device__ __forceinline__ T activate(T v) {
    if constexpr (OP == Pointwise::bias_sigmoid)
        return sigmoid(v);
    else if constexpr (OP == Pointwise::bias_relu)
        return relu(v);
    else
        return v;
}

// The backward op (dsigmoid, drelu) applied to the gradient g with the saved activation output y.
template <Pointwise OP>
__device__ __forceinline__ T activation_grad(T g, T y) {
    if constexpr (OP == Pointwise::dsigmoid)
        return sigmoid_grad(g, y);
    else if constexpr (OP == Pointwise::drelu)
        return relu_grad(g, y);
    else
        return g;
}
