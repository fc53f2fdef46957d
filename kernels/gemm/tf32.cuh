// The GEMM family's TF32 math path (math="tf32"): 3xtf32.cuh's fragments, tiles and layout, with
// each operand rounded to TF32 once and one MMA a k step (its multiply_tiles says how).
{% include "gemm/3xtf32.cuh" %}
