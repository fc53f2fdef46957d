"""Run rendered kernels on the CPU: the source under tests/cuda_emu.h, built with g++, each block's
threads as OS threads, so CI checks what every family's kernels compute without a GPU. Each inline
PTX statement becomes a call of its emulation: asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x))
-> emu::ptx::cvt_rna_tf32_f32(r, x), operands in order (outputs by reference).

    launches = [Launch(instance, [out, x, np.int32(n), np.float32(0.5)]), ...]
    run(launches, tmp_path)       # array arguments are copied in, and back out after the run

Arguments are what the GPU launch passes: NumPy arrays in place of device arrays, NumPy scalars of
the kernel parameter's type, np.uint64(0) for a null pointer.
"""
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

GXX = shutil.which("g++")
HEADER_DIR = Path(__file__).resolve().parent
_DYNAMIC_SMEM = re.compile(r"extern __shared__ __align__\(\d+\) unsigned char (\w+)\[\];")
_ASM = re.compile(r"\basm\s*(?:volatile\s*)?\(")
_OPERAND = re.compile(r'^"[=+]?\w+"\s*\((.*)\)$', re.S)


def _split_top_level(text: str, separator: str) -> list[str]:
    """`text` split at `separator` outside brackets and string literals."""
    parts, depth, quoted, start = [], 0, False, 0
    for i, ch in enumerate(text):
        if ch == '"' and text[i - 1] != "\\":
            quoted = not quoted
        elif not quoted and ch in "([{":
            depth += 1
        elif not quoted and ch in ")]}":
            depth -= 1
        elif not quoted and depth == 0 and ch == separator:
            parts.append(text[start:i])
            start = i + 1
    return parts + [text[start:]]


def _ptx_call(statement: str) -> str:
    """The emu::ptx call of one asm statement's contents: `"template" : outputs : inputs`."""
    template, *operand_lists = _split_top_level(statement, ":")
    mnemonic = re.match(r'\s*"([\w.]+)', template)[1]
    operands = []
    for operand in (o.strip() for part in operand_lists for o in _split_top_level(part, ",")):
        if operand:
            match = _OPERAND.match(operand)
            assert match, f"unexpected asm operand {operand!r}"
            operands.append(match[1])
    return f"emu::ptx::{mnemonic.replace('.', '_')}({', '.join(operands)})"


def translate_ptx(source: str) -> str:
    """`source` with every asm statement replaced by its emu::ptx call."""
    out, pos = [], 0
    for match in _ASM.finditer(source):
        if match.start() < pos:
            continue
        depth, end = 1, match.end()
        while depth:                       # the statement's closing parenthesis
            ch = source[end]
            if ch == '"':
                end = source.index('"', end + 1)
            depth += {"(": 1, ")": -1}.get(ch, 0)
            end += 1
        out += [source[pos:match.start()], _ptx_call(source[match.end():end - 1])]
        pos = end
    return "".join(out) + source[pos:]


@dataclass
class Launch:
    instance: object      # autogemm.runtime.family.Instance
    args: list


def _literal(i: int, arg) -> str:
    if isinstance(arg, np.ndarray):
        return f"Buf{{b{i}.data()}}"
    if isinstance(arg, np.uint64):
        assert arg == 0, "a uint64 argument stands for a null pointer"
        return "Buf{nullptr}"
    if isinstance(arg, np.float32):
        return f"std::bit_cast<float>(uint32_t({arg.view(np.uint32)}u))"
    if isinstance(arg, np.float64):
        return f"std::bit_cast<double>(uint64_t({arg.view(np.uint64)}ull))"
    if isinstance(arg, (np.int32, np.int64)):
        return f"int{arg.dtype.itemsize * 8}_t({int(arg)})"
    raise TypeError(f"cannot pass {type(arg).__name__} to an emulated kernel")


def _program(launch: Launch) -> str:
    inst, g = launch.instance, launch.instance.geometry
    source = translate_ptx(_DYNAMIC_SMEM.sub(r"unsigned char* \1 = emu::dynamic_smem;", inst.source))
    arrays = [(i, a) for i, a in enumerate(launch.args) if isinstance(a, np.ndarray)]
    lines = [f'    auto b{i} = read("arg{i}.bin", {a.nbytes});' for i, a in arrays]
    lines.append(f"    emu::launch({inst.name}, dim3{{{', '.join(map(str, g.grid))}}}, "
                 f"dim3{{{', '.join(map(str, g.block))}}}, {g.smem_bytes}, "
                 + ", ".join(_literal(i, a) for i, a in enumerate(launch.args)) + ");")
    lines += [f'    write("arg{i}.out", b{i}, {a.nbytes});' for i, a in arrays]
    body = "\n".join(lines)
    return f'''#include "cuda_emu.h"
#include <cstdio>

{source}

struct Buf {{
    void* p;
    template <class T> operator T*() const {{ return static_cast<T*>(p); }}
}};

static std::vector<emu::Chunk> read(const char* path, size_t bytes) {{
    std::vector<emu::Chunk> buf(bytes / sizeof(emu::Chunk) + 1);
    FILE* f = std::fopen(path, "rb");
    if (!f || std::fread(buf.data(), 1, bytes, f) != bytes) std::abort();
    std::fclose(f);
    return buf;
}}

static void write(const char* path, const std::vector<emu::Chunk>& buf, size_t bytes) {{
    FILE* f = std::fopen(path, "wb");
    if (!f || std::fwrite(buf.data(), 1, bytes, f) != bytes) std::abort();
    std::fclose(f);
}}

int main() {{
{body}
}}
'''


def _build_and_run(launch: Launch, workdir: Path):
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "main.cpp").write_text(_program(launch))
    for i, a in enumerate(launch.args):
        if isinstance(a, np.ndarray):
            (workdir / f"arg{i}.bin").write_bytes(np.ascontiguousarray(a).tobytes())
    build = subprocess.run([GXX, "-std=c++20", "-O1", "-pthread", "-Wno-unknown-pragmas", f"-I{HEADER_DIR}",
                            "main.cpp", "-o", "kernel"], cwd=workdir, capture_output=True, text=True)
    if build.returncode:
        raise RuntimeError(f"{launch.instance.name}: g++ failed:\n{build.stderr[:3000]}")
    ran = subprocess.run(["./kernel"], cwd=workdir, capture_output=True, text=True, timeout=300)
    if ran.returncode:
        raise RuntimeError(f"{launch.instance.name}: exit status {ran.returncode}: {ran.stderr[:1000]}")
    for i, a in enumerate(launch.args):
        if isinstance(a, np.ndarray):
            a[...] = np.frombuffer((workdir / f"arg{i}.out").read_bytes(), dtype=a.dtype).reshape(a.shape)


def run(launches: list[Launch], workdir: Path, jobs: int = 2):
    """Build and run each launch (`jobs` at a time), each in its own folder under `workdir`."""
    with ThreadPoolExecutor(jobs) as pool:
        list(pool.map(lambda il: _build_and_run(il[1], Path(workdir) / f"launch{il[0]}"), enumerate(launches)))
