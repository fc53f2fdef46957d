"""What ptxas makes of the implicit-GEMM convolutions' main loops, without a GPU: the first
candidate of each direction for one layer at one precision, rendered, compiled for sm_90a
(`nvcc -cubin --resource-usage`) and disassembled (`cuobjdump -sass`); for each, its registers and
the instructions of the loop that holds its MMAs (the largest backward branch around them), by
opcode. Needs nvcc and cuobjdump (with nvdisasm) on PATH.

    python benchmarks/sass_loop.py 1000x32x12x12x64x5 tf32
"""
import argparse
import collections
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from autogemm.runtime.device import H100
from autogemm.runtime.family import family
from autogemm.runtime.render import render
from kernels.contract import TEMPLATE_DIR

DIRECTIONS = ("conv2d", "conv2d_dgrad", "conv2d_wgrad")
INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)([^;]*);")


def main_loop(sass: str) -> collections.Counter:
    """Opcodes of the largest loop (a backward BRA and its target) that holds an HMMA or FFMA."""
    ins = [(int(m.group(1), 16), m.group(2).split(".")[0], m.group(3)) for m in INSTRUCTION.finditer(sass)]
    best: list[str] = []
    for address, op, args in ins:
        target = re.search(r"0x([0-9a-f]+)", args) if op == "BRA" else None
        if target and int(target.group(1), 16) < address:
            body = [o for a, o, _ in ins if int(target.group(1), 16) <= a <= address]
            if {"HMMA", "FFMA"} & set(body) and len(body) > len(best):
                best = body
    return collections.Counter(best)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("layer", help="NxCxHxWxFxK: the forward convolution's sizes")
    p.add_argument("precision", choices=("fp32", "tf32", "bf16"))
    args = p.parse_args()
    if not re.fullmatch(r"\d+(x\d+){5}", args.layer):
        p.error(f"layer {args.layer!r}: give the forward convolution as NxCxHxWxFxK, e.g. 1000x32x12x12x64x5")
    missing = [tool for tool in ("nvcc", "cuobjdump", "nvdisasm") if not shutil.which(tool)]
    if missing:
        sys.exit(f"sass_loop: {', '.join(missing)} not on PATH (the CUDA toolkit's; cuobjdump needs nvdisasm)")
    sizes = tuple(int(s) for s in args.layer.split("x"))
    with tempfile.TemporaryDirectory() as tmp:
        for name in DIRECTIONS:
            fam = family(name)
            try:
                problem = fam.module.problem_of(sizes, "-", "float32" if args.precision == "fp32" else args.precision)
            except ValueError as exc:
                sys.exit(f"sass_loop: {name} {args.layer}: {exc}")
            cfg = fam.candidates(problem, H100)[0]
            source = Path(tmp, f"{name}.cu")
            source.write_text(render(fam.module.TEMPLATE, name=fam.instance_name(cfg, problem),
                                     **fam.module.template_args(cfg, problem)))
            cubin = source.with_suffix(".cubin")
            built = subprocess.run(["nvcc", "-arch=sm_90a", "-cubin", "--resource-usage", "-I", str(TEMPLATE_DIR),
                                    "-o", str(cubin), str(source)], capture_output=True, text=True, check=True)
            registers = re.search(r"Used (\d+) registers", built.stderr).group(1)
            sass = subprocess.run(["cuobjdump", "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
            loop = main_loop(sass)
            print(f"{name:13} {dict(cfg)}")
            print(f"{'':13} {registers} registers; main loop {sum(loop.values())} instructions, "
                  f"{loop['HMMA']} HMMA: {dict(loop.most_common(10))}")


if __name__ == "__main__":
    main()
