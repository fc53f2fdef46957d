"""autogemm: Jinja-templated CUDA GEMM and elementwise kernels, compiled with CuPy and tuned with Optuna.

    import autogemm
    d = autogemm.gemm(a, b, trans_b=True, epilogue="bias_sigmoid", bias=b1)

The public names load on first use (PEP 562, as SciPy's submodules do): `import autogemm` itself
costs milliseconds, so a command can take over Ctrl-C (`autogemm.signals`) before NumPy and the
kernels load. CuPy is imported lazily too: the templates, spaces and CLI work on machines without a
GPU. The layers below this package's public names (runtime, store, ops, tuning, cli) are described
in docs/ARCHITECTURE.md; a user of autogemm (nn, the trainer, is one) needs only the names here.
"""
import importlib

# Each public name and the module that defines it (a module named by itself: the submodule).
_WHERE = {
    # the version (pyproject.toml's in a checkout, else the installed metadata's)
    "__version__": "autogemm.version",
    # the operations
    **dict.fromkeys(["gemm", "plan_gemm", "GemmCall", "row_major_operand", "empty_column_major", "to_bf16",
                     "transpose"], "autogemm.ops.gemm"),
    **dict.fromkeys(["elementwise", "bias_activation", "activation_grad", "sgd_update", "adam_update",
                     "softmax_xent", "linear_xent", "linear_logits", "linear_backward", "column_sums", "dense_stack"],
                    "autogemm.ops.elementwise"),
    # any family's kernel on named arrays (a plugin family's: autogemm/runtime/plugins.py), and a
    # family package registered from its folder
    **dict.fromkeys(["launch", "load_family"], "autogemm.ops.families"),
    # a CUDA kernel of your own, no template: tuned with its choices as #defines, then launched
    "tune_kernel": "autogemm.tuning.raw", "launch_kernel": "autogemm.ops.raw",
    # the baseline: cuBLAS's GEMM in the same precisions
    "cublas_gemm": "autogemm.ops.cublas",
    # the CNN's: NCHW images, (F, C, K, K) filters
    **dict.fromkeys(["conv2d", "conv2d_backward_data", "conv2d_backward_weights", "maxpool2x2",
                     "maxpool2x2_backward"], "autogemm.ops.conv"),
    # errors: every one is a one-line message for the user
    **dict.fromkeys(["AutogemmError", "BadArguments", "CompileError", "InvalidConfig", "StoreError"],
                    "autogemm.errors"),
    # the user's files: read only if regular, written atomically; autogemm's cache folder; the stop
    # signals (Ctrl-C, SIGTERM, SIGHUP) as a command takes them
    "files": "autogemm.files", "cache_dir": "autogemm.store.locations", "signals": "autogemm.signals",
    # the conventions of autogemm's and nn's command lines (one syntax for a list of sizes)
    "arguments": "autogemm.arguments",
    # a kernel launch to tune, as a network's `autogemm.targets` entry point lists its step's; the
    # op of a launch whose family has none, a GEMM launch's (layout and epilogue); the families that
    # compute one call (all tuned, the fastest runs)
    "Target": "autogemm.store.keys", "NO_OP": "kernels.contract", "gemm_key_op": "kernels.gemm.call",
    "CONV_POOL_OP": "kernels.conv2d",
    "IMPLEMENTATIONS": "kernels",
    # what the tuned records say of a launch's time (cost models), the arithmetics a family's keys name
    **dict.fromkeys(["measured", "Measured", "has_records"], "autogemm.store.lookup"),
    "key_dtypes": "autogemm.store.keys",
    # the GEMM's epilogues and precisions, and how many classes the output layer's kernels take
    "GEMM_EPILOGUES": "kernels.gemm.call", "GEMM_PRECISIONS": "kernels.gemm.call",
    "LINEAR_XENT_MAX_CLASSES": "kernels.linear_xent", "LINEAR_BACKWARD_MAX_CLASSES": "kernels.linear_backward",
    "LINEAR_BACKWARD_TRANSPOSED": "kernels.linear_backward",
    # whether the dense_stack kernel runs a stack of these widths; its ops' suffixes for the input's
    # gradient, and for that gradient below a pool
    "dense_stack_runs": "kernels.dense_stack", "DENSE_STACK_INPUT_GRAD": "kernels.dense_stack",
    "DENSE_STACK_POOLED": "kernels.dense_stack",
}
# A public name that is another name in its module.
_RENAMED = {"key_dtypes": "dtypes", "CONV_POOL_OP": "POOL", "gemm_key_op": "key_op", "GEMM_EPILOGUES": "EPILOGUES",
            "GEMM_PRECISIONS": "PRECISIONS", "LINEAR_XENT_MAX_CLASSES": "MAX_CLASSES",
            "LINEAR_BACKWARD_MAX_CLASSES": "MAX_CLASSES", "LINEAR_BACKWARD_TRANSPOSED": "TRANSPOSED",
            "dense_stack_runs": "runs", "DENSE_STACK_INPUT_GRAD": "INPUT_GRAD", "DENSE_STACK_POOLED": "POOLED"}

__all__ = list(_WHERE)


def __getattr__(name: str):
    """A public name, its module imported on first use (and kept as this package's attribute)."""
    if name not in _WHERE:
        raise AttributeError(f"module 'autogemm' has no attribute {name!r}")
    module = importlib.import_module(_WHERE[name])
    value = module if module.__name__ == f"{__name__}.{name}" else getattr(module, _RENAMED.get(name, name))
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
