// The GEMM family's TF32 math path (math="tf32"): 3xtf32.cuh's fragments, tiles and layout, with
// one MMA a k step on the operands as read (its multiply_tiles says how).
{% include "gemm/3xtf32.cuh" %}
