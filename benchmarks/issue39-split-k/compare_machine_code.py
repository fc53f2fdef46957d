"""Whether two trees' renders of the same records (render_records.py's JSON) compile to the same
machine code: each distinct pair of normalised sources compiled by nvcc for sm_90a, the cubins'
code sections (.text.*) compared byte for byte. One JSON line per pair: [first record, records, same].

    python compare_machine_code.py OLD.json NEW.json > machine-code.jsonl
"""
import concurrent.futures
import json
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

from autogemm.runtime.render import normalised


def machine_code(source: str) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        cu, cubin = Path(folder, "k.cu"), Path(folder, "k.cubin")
        cu.write_text(source)
        subprocess.run(["nvcc", "-arch=sm_90a", "-cubin", "--std=c++17", "-o", str(cubin), str(cu)],
                       check=True, capture_output=True)
        return text_sections(cubin.read_bytes())


def text_sections(elf: bytes) -> dict:
    """{section name: bytes} of an ELF64 file's code sections (.text.*)."""
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + i * shentsize) for i in range(shnum)]
    names = headers[shstrndx][4]

    def name(header):
        start = names + header[0]
        return elf[start:elf.index(b"\0", start)].decode()
    return {name(h): elf[h[4]:h[4] + h[5]] for h in headers if name(h).startswith(".text")}


def main(old_path: str, new_path: str):
    old, new = json.loads(Path(old_path).read_text()), json.loads(Path(new_path).read_text())
    pairs = {}
    for record in old:
        pairs.setdefault((normalised(old[record][1]), normalised(new[record][1])), []).append(record)

    def compare(records):
        return records[0], len(records), machine_code(old[records[0]][1]) == machine_code(new[records[0]][1])
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        for row in pool.map(compare, pairs.values()):
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:3])
