"""Run rendered kernels on the CPU: the source under cuda_emu.h (beside this module), built with g++, each block's
threads as fibers taking turns at their waits, so CI checks what every family's kernels compute
without a GPU. Each inline PTX statement becomes a call of its emulation:
asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x)) -> emu::ptx::cvt_rna_tf32_f32(r, x), operands
in order (outputs by reference); a "{ ... }" block is one call, named by its first instruction; an
empty statement (a fence for the compiler's view of registers) is nothing.

    launches = [Launch(instance, [out, x, np.int32(n), np.float32(0.5)]), ...]
    run(launches, tmp_path)       # array arguments are copied in, and back out after the run

Arguments are what the GPU launch passes: NumPy arrays in place of device arrays, NumPy scalars of
the kernel parameter's type, np.uint64(0) for a null pointer, and tensor maps
(autogemm.runtime.tensor_map.TensorMap) of arrays among the arguments, which the emulator encodes.
"""
import atexit
import re
import shutil
import subprocess
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from autogemm.runtime.tensor_map import TensorMap

GXX = shutil.which("g++")
HEADER_DIR = Path(__file__).resolve().parent
EMULATED_SMS = 3   # a persistent kernel's blocks: fewer than its tiles, so that each takes several
_DYNAMIC_SMEM = re.compile(r"extern __shared__ __align__\(\d+\) unsigned char (\w+)\[\];")
_ASM = re.compile(r"\basm\s*(?:volatile\s*)?\(")
_OPERAND = re.compile(r'^"[=+]?\w+"\s*\((.*)\)$', re.S)
# A statement's first instruction, past a brace block's opening and its .reg declarations (a block
# is emulated as a whole, under its first instruction's name), up to a "::" qualifier.
_MNEMONIC = re.compile(r'\s*"(?:\{(?:\\n|\s)*)?(?:\.reg [^;]*;(?:\\n|\s)*)*([\w.]+)')


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
    """The emu::ptx call of one asm statement's contents: `"template" : outputs : inputs [: clobbers]`."""
    template, *operand_lists = _split_top_level(statement, ":")
    if template.strip() == '""':
        return "((void)0)"              # an empty statement: a register fence for the compiler alone
    mnemonic = _MNEMONIC.match(template)[1]
    operands = []
    for operand in (o.strip() for part in operand_lists[:2] for o in _split_top_level(part, ",")):  # not clobbers
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


def _literal(i: int, arg, args: list) -> str:
    if isinstance(arg, TensorMap):
        j = next(j for j, a in enumerate(args) if a is arg.array)
        (inner, outer), (box_inner, box_outer) = arg.dims, arg.box
        return (f"emu::TensorMapArgument{{b{j}.data(), {arg.array.itemsize}, {inner}, {outer}, "
                f"{arg.ld * arg.array.itemsize}, {box_inner}, {box_outer}, {arg.swizzle}}}")
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


def _program(launches: list[Launch]) -> str:
    """One program running `launches` in order: each kernel source in a namespace of its own (they
    share constant names), each launch's arrays read from l<j>_arg<i>.bin and written back to .out."""
    namespaces, sources, calls = {}, [], []
    for j, launch in enumerate(launches):
        inst, g = launch.instance, launch.instance.geometry
        if inst.name not in namespaces:
            namespaces[inst.name] = ns = f"kernel{len(namespaces)}"
            source = translate_ptx(_DYNAMIC_SMEM.sub(r"unsigned char* \1 = emu::dynamic_smem;", inst.source))
            sources.append(f"namespace {ns} {{\n{source}\n}}  // namespace {ns}")
        arrays = [(i, a) for i, a in enumerate(launch.args) if isinstance(a, np.ndarray)]
        lines = [f'    std::fprintf(stderr, "launch {j}: {inst.name}\\n");']
        lines += [f'    auto b{i} = read("l{j}_arg{i}.bin", {a.nbytes});' for i, a in arrays]
        grid = g.launch_grid(EMULATED_SMS)
        lines.append(f"    emu::launch({namespaces[inst.name]}::{inst.name}, dim3{{{', '.join(map(str, grid))}}}, "
                     f"dim3{{{', '.join(map(str, g.block))}}}, {g.smem_bytes}, dim3{{{', '.join(map(str, g.cluster))}}}, "
                     + ", ".join(_literal(i, a, launch.args) for i, a in enumerate(launch.args)) + ");")
        lines += [f'    write("l{j}_arg{i}.out", b{i}, {a.nbytes});' for i, a in arrays]
        calls.append("  {\n" + "\n".join(lines) + "\n  }")
    return f'''#include "cuda_emu.h"
#include <cstdio>

{chr(10).join(sources)}

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
{chr(10).join(calls)}
}}
'''


FLAGS = ("-std=c++20", "-O1", "-Wno-unknown-pragmas")
_PCH_LOCK = threading.Lock()
_PCH_DIRS: dict[tuple[str, ...], Path | None] = {}


def _pch_dir(defines: tuple[str, ...]) -> Path | None:
    """A folder holding cuda_emu.h.gch, cuda_emu.h precompiled with FLAGS and `defines`, built once a
    session (g++ spends about as long on the header's includes as on a program's kernels); searched
    before HEADER_DIR, it stands in for the header. None where g++ cannot precompile it: the header then."""
    with _PCH_LOCK:
        if defines not in _PCH_DIRS:
            folder = Path(tempfile.mkdtemp(prefix="cuda_emu_pch_"))
            atexit.register(shutil.rmtree, folder, True)
            build = subprocess.run([GXX, *FLAGS, *(f"-D{d}" for d in defines), "-x", "c++-header",
                                    str(HEADER_DIR / "cuda_emu.h"), "-o", str(folder / "cuda_emu.h.gch")],
                                   capture_output=True, text=True)
            _PCH_DIRS[defines] = None if build.returncode else folder
        return _PCH_DIRS[defines]


def _build_and_run(launches: list[Launch], workdir: Path, defines: tuple[str, ...]):
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "main.cpp").write_text(_program(launches))
    names = ", ".join(dict.fromkeys(launch.instance.name for launch in launches))
    for j, launch in enumerate(launches):
        for i, a in enumerate(launch.args):
            if isinstance(a, np.ndarray):
                (workdir / f"l{j}_arg{i}.bin").write_bytes(np.ascontiguousarray(a).tobytes())
    pch = _pch_dir(defines)
    build = subprocess.run([GXX, *FLAGS, *([f"-I{pch}"] if pch else []), f"-I{HEADER_DIR}",
                            *(f"-D{d}" for d in defines), "main.cpp", "-o", "kernel"], cwd=workdir, capture_output=True, text=True)
    if build.returncode:
        raise RuntimeError(f"{names}: g++ failed:\n{build.stderr[:3000]}")
    ran = subprocess.run(["./kernel"], cwd=workdir, capture_output=True, text=True, timeout=600)
    if ran.returncode:
        last = ran.stderr.strip().splitlines()[-1:] or ["before any launch"]
        raise RuntimeError(f"exit status {ran.returncode} in {last[0]}: {ran.stderr[-1000:]}")
    for j, launch in enumerate(launches):
        for i, a in enumerate(launch.args):
            if isinstance(a, np.ndarray):
                out = (workdir / f"l{j}_arg{i}.out").read_bytes()
                a[...] = np.frombuffer(out, dtype=a.dtype).reshape(a.shape)


# Launches built into one program: g++ spends about 1 s a program on cuda_emu.h's headers, and
# compiles each instance once a program, however many of its launches the program holds.
PER_PROGRAM = 32


def run(launches: list[Launch], workdir: Path, jobs: int = 2, defines: tuple[str, ...] = ()):
    """Build and run the launches, in order, as programs of at most PER_PROGRAM launches (`jobs`
    programs at a time, each in its own folder under `workdir`), with the emulator's `defines`
    (EMU_BULK_COPIES_LAND_AT_ISSUE: bulk tensor copies land when issued, not at the wait)."""
    programs = max(jobs, -(-len(launches) // PER_PROGRAM))
    size = -(-len(launches) // programs)
    groups = [launches[i:i + size] for i in range(0, len(launches), size)]
    with ThreadPoolExecutor(jobs) as pool:
        list(pool.map(lambda ig: _build_and_run(ig[1], Path(workdir) / f"program{ig[0]}", defines), enumerate(groups)))
