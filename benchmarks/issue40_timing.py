"""What issue 40's GEMM comparisons share (issue40_pretranspose.py, issue40_tiled_tf32.py,
issue40_reg_a.py, issue40_swap.py): a shape of their command lines as a float32 problem, and
configs of a family checked and timed against cuBLAS as the tuner does it."""
from autogemm.runtime.family import family
from autogemm.store.keys import key_of
from autogemm.tuning.measures import measure_for
from kernels.gemm.call import Problem

NAN = float("nan")


def problem_of(text: str, precision: str) -> Problem:
    """'MxNxK:op' as a GEMM of float32 arrays at `precision`."""
    sizes, op = text.split(":")
    m, n, k = map(int, sizes.split("x"))
    return Problem.contiguous(m, n, k, "float32", op[0] == "t", op[1] == "t", precision=precision)


def timed_rows(fam: str, configs: list, problem: Problem, device, reps: int, **fields) -> list[dict]:
    """A row per config of family `fam` (`fields`, its kernel and config, its rank, `default` for the
    first, cuBLAS's median µs on the same operands), each checked against float64 and timed as the
    tuner times it (any copies included): its median and its ratio to cuBLAS's, or the error it
    raised (a mismatch or launch failure is a result too)."""
    measure = measure_for(key_of(fam, problem), device)
    measure.prepare(configs)
    base = measure.baseline(reps).median_us
    rows = []
    for i, cfg in enumerate(configs):
        row = dict(fields, family=fam, kernel=family(fam).instance_name(cfg, problem), config=dict(cfg), rank=i,
                   default=i == 0, cublas_us=base)
        try:
            row["median_us"] = measure(cfg, reps).median_us
            row["vs_cublas"] = row["median_us"] / base
        except Exception as exc:
            row["error"] = f"{type(exc).__name__}: {exc}"[:300]
        rows.append(row)
    return rows


def ratio(row: dict | None) -> float:
    """A row's time over cuBLAS's, NaN where it failed or is missing."""
    return row.get("vs_cublas", NAN) if row else NAN


def best(rows: list[dict]) -> float:
    """The least ratio of `rows`, NaN where none was timed."""
    return min((r["vs_cublas"] for r in rows if "vs_cublas" in r), default=NAN)
