// The implicit GEMM's math path (math="{{ math }}"): the GEMM family's, on tiles both stored
// [k][row] (A_KMAJOR, B_KMAJOR false): FMAs with one k per fragment read (gemm/fma.cuh), or on
// tensor cores mma.sync's fragments read from them (gemm/3xtf32.cuh, under tf32 one MMA a k step);
// or, the implicit GEMMs' own, BF16 MMAs on tiles of bfloat16 k pairs (conv2d/bf16_mma.cuh).
constexpr bool A_KMAJOR = false, B_KMAJOR = false;
constexpr int KC = 1;
constexpr int LDS_A = BM + PAD, LDS_B = BN + PAD;

{% if math == "fma" %}
{% include "gemm/fma.cuh" %}
{% elif math == "bf16" %}
{% include "conv2d/bf16_mma.cuh" %}
{% else %}
{% if math == "tf32" and stages > 1 %}
{% set rounded_tiles = true %}{# the two-stage gather stores TF32 values: implicit_gemm.cuh #}
{% endif %}
{% include "gemm/3xtf32.cuh" %}
{% endif %}
