"""The public operations (autogemm.gemm, autogemm.linear_xent, ...): check the arrays, choose a
config through the store's lookup (or take the one given), render and compile its kernel once
(runtime), and launch it.

    kernels.py      the kernel of a call: its config chosen, rendered, cached per problem
    gemm.py         autogemm.gemm, and plan_gemm: a GEMM checked and bound once, launched many times
    elementwise.py  the elementwise family, softmax + cross-entropy, the output layer, column sums, Adam
    conv.py         the CNN's: convolution forward and backward (data, weights), 2 x 2 max-pooling
    cublas.py       the baseline: cuBLAS's GEMM at each of autogemm.gemm's precisions
"""
