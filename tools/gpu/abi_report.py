# SPDX-License-Identifier: Apache-2.0
"""How the built extension meets torch's C++ runtime, for diagnosing crashes
inside C++ code shared with torch (e.g. formatting an error message).

Prints: torch's libstdc++ ABI flag and compiler; the compilers recorded in
the .comment sections of our .so and of libc10/libtorch_cpu; which
libstdc++, libgcc_s and libgomp the process maps; the GLIBCXX versions our
.so requires against those the mapped libstdc++ provides; what the build
recorded (_build_info.json, and the ABI flag of every translation unit in
compile_commands.json); and, from the dynamic linker (LD_DEBUG=bindings in
a child process), which library each C++ runtime symbol of our .so was bound
to: a std:: symbol bound to our .so itself means the build linked a private
copy of libstdc++ into it (a compiler whose libstdc++ is static only), and
one bound to a torch library means torch's exported copy of that code; either
way two implementations of the same code meet in one process.

    python -m tools.gpu.abi_report [--build-dir build]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import struct
import subprocess
import sys
from collections import Counter
from pathlib import Path

import torch

RUNTIME_LIBS = ("libstdc++", "libgcc_s", "libgomp", "libc10.so", "libtorch_cpu.so")


def elf_section(path: Path, name: str) -> bytes:
    """Contents of one section of a 64-bit little-endian ELF file."""
    data = path.read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2:
        return b""
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)

    def header(i: int) -> tuple[int, int, int]:
        base = shoff + i * shentsize
        sh_name = struct.unpack_from("<I", data, base)[0]
        offset, size = struct.unpack_from("<QQ", data, base + 0x18)
        return sh_name, offset, size

    _, str_off, _ = header(shstrndx)
    for i in range(shnum):
        sh_name, offset, size = header(i)
        end = data.index(b"\0", str_off + sh_name)
        if data[str_off + sh_name : end].decode() == name:
            return data[offset : offset + size]
    return b""


def comments(path: Path) -> list[str]:
    raw = elf_section(path, ".comment")
    return sorted({s.decode(errors="replace") for s in raw.split(b"\0") if s})


def glibcxx_versions(path: Path) -> set[str]:
    return set(re.findall(rb"GLIBCXX_\d+\.\d+(?:\.\d+)?", path.read_bytes()))


def version_key(v: bytes) -> tuple[int, ...]:
    return tuple(int(x) for x in v.decode().split("_")[1].split("."))


def mapped_libraries() -> dict[str, str]:
    libs: dict[str, str] = {}
    for line in Path("/proc/self/maps").read_text().splitlines():
        parts = line.split()
        if len(parts) >= 6 and parts[5].startswith("/"):
            base = os.path.basename(parts[5])
            if any(base.startswith(n) for n in RUNTIME_LIBS):
                libs.setdefault(base, parts[5])
    return libs


def compile_flags(build_dir: Path) -> list[str]:
    lines = []
    for db in sorted(build_dir.glob("*/compile_commands.json")):
        for entry in json.loads(db.read_text()):
            cmd = entry.get("command") or " ".join(entry.get("arguments", []))
            abi = re.findall(r"-D_GLIBCXX_USE_CXX11_ABI=(\d)", cmd)
            compiler = os.path.basename(cmd.split()[0])
            src = os.path.relpath(entry["file"], build_dir.parent)
            lines.append(
                f"  {src}: {compiler}, _GLIBCXX_USE_CXX11_ABI={','.join(abi) or 'unset'}"
            )
    return lines


BINDING = re.compile(
    r"binding file (\S+) \[\d+\] to (\S+) \[\d+\]: normal symbol `([^']+)'"
)


def bindings(so: Path) -> list[tuple[str, str]]:
    """(symbol, library) for every symbol our .so got bound to, as ld.so
    resolved it in a child process that loads the extension."""
    code = "import vllm_myops._extension as e; e.ensure_loaded()"
    env = dict(os.environ, LD_DEBUG="bindings", LD_BIND_NOW="1")
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = []
    for m in BINDING.finditer(proc.stderr):
        if os.path.basename(m.group(1)) == so.name:
            out.append((m.group(3), m.group(2)))
    return out


def demangle(names: list[str]) -> list[str]:
    if not names or shutil.which("c++filt") is None:
        return names
    proc = subprocess.run(
        ["c++filt"], input="\n".join(names), capture_output=True, text=True
    )
    return proc.stdout.splitlines()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build-dir", type=Path, default=Path("build"))
    args = parser.parse_args()

    from vllm_myops import _extension

    _extension.ensure_loaded()
    spec = importlib.util.find_spec(f"vllm_myops.{_extension.EXTENSION_NAME}")
    assert spec is not None and spec.origin is not None
    so = Path(spec.origin)
    torch_lib = Path(torch.__file__).parent / "lib"

    print(
        f"torch {torch.__version__} (cuda {torch.version.cuda}), python {sys.version.split()[0]}"
    )
    print(f"torch._C._GLIBCXX_USE_CXX11_ABI = {torch._C._GLIBCXX_USE_CXX11_ABI}")
    compiler = re.search(r"CXX_COMPILER=(\S+)", torch.__config__.show())
    print(f"torch built with: {compiler.group(1) if compiler else '?'}")
    print(f"extension: {so}")
    print(f"build info: {json.dumps(_extension.build_info())}")

    print("\n.comment sections (compilers that built each file):")
    for path in (so, torch_lib / "libc10.so", torch_lib / "libtorch_cpu.so"):
        if path.exists():
            print(f"  {path.name}: {' | '.join(comments(path))}")

    print("\nmapped into this process:")
    libs = mapped_libraries()
    for base, path in sorted(libs.items()):
        print(f"  {base}: {path}")

    stdcxx = next((Path(p) for b, p in libs.items() if b.startswith("libstdc++")), None)
    required = glibcxx_versions(so)
    if required:
        newest = max(required, key=version_key).decode()
        print(
            f"\nGLIBCXX required by {so.name}: newest {newest} ({len(required)} versions)"
        )
    if stdcxx is not None:
        provided = glibcxx_versions(stdcxx)
        print(
            f"GLIBCXX provided by {stdcxx}: newest {max(provided, key=version_key).decode()}"
        )
        missing = sorted((required - provided), key=version_key)
        print(f"required but not provided: {[m.decode() for m in missing] or 'none'}")

    print("\ncompile_commands.json (every translation unit):")
    print(
        "\n".join(compile_flags(args.build_dir)) or f"  none under {args.build_dir}/*/"
    )

    bound = bindings(so)
    names = demangle([s for s, _ in bound])
    print(f"\nld.so bindings of {so.name}: {len(bound)} symbols, by library:")
    for lib, n in Counter(os.path.basename(lib) for _, lib in bound).most_common():
        print(f"  {n:5d}  {lib}")
    std = re.compile(r"^((vtable|VTT|typeinfo|typeinfo name) for )?std::")
    std_bound = [(name, lib) for name, (_, lib) in zip(names, bound) if std.match(name)]
    # Members only the runtime itself defines (our own template instances,
    # e.g. std::vector<at::Tensor>, bind to us legitimately).
    runtime_only = re.compile(r"^std::(ios_base|locale)\b")
    private = [
        name
        for name, lib in std_bound
        if os.path.basename(lib) == so.name and runtime_only.match(name)
    ]
    print(
        f"C++ runtime symbols (std::ios_base, std::locale) {so.name} binds to "
        f"itself, i.e. a private libstdc++ copy: {len(private)}"
    )
    for name in private[:10]:
        print(f"  {name}")
    foreign = [
        (name, lib)
        for name, lib in std_bound
        if os.path.basename(lib).startswith(("libc10", "libtorch"))
    ]
    print(
        f"std:: symbols of {so.name} bound to a torch library instead of libstdc++: {len(foreign)}"
    )
    for name, lib in foreign:
        print(f"  {name}  ->  {lib}")


if __name__ == "__main__":
    main()
