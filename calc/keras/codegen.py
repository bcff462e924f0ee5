"""The machine code a plan's compile skips: XLA stops after it assigns the buffers.

XLA's GPU compiler assigns every buffer of the step (what ``memory_analysis()`` reports) after its
HLO passes, dumps the optimised module with that assignment (``--xla_dump_to``, which the plan's
child sets for the peak's explanation), and only then emits the kernels: each lowered from MLIR to
LLVM, compiled to PTX and assembled by ``ptxas`` (925 kernels for DenseNet121's step, most of its
compile). A plan never runs. So where its compile dumps, the plan's compile names a kernel cache
(``xla_gpu_kernel_cache_file``) that XLA reads between the dump and the first kernel and refuses,
by a name in it no kernel can have (``STOP_MARK``): the compile fails there, and the plan's bytes
are read from the dumped assignment as ``memory_analysis()`` computes them
(``calc.xla.assignment.compiled_memory``).

Should a compile get past that point anyway, what it emits is cheap: LLVM optimises nothing
(``xla_backend_optimization_level`` 0, which acts after the buffers are assigned) and XLA's CUDA
folder is one whose ``bin/ptxas`` answers XLA's version question with the real assembler and
writes an empty file for each kernel (``nvvm``, the libdevice the PTX needs, is the real one).
The plan is the same to the byte (``benchmarks/xla_codegen.py`` compiles configurations each way
and compares every byte and what fills the peak).
"""

from __future__ import annotations

import atexit
import functools
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Literal

# POSIX sh: XLA starts one for each kernel, so it must start in milliseconds (Python would not).
_PTXAS = """#!/bin/sh
# XLA asks the assembler's version (the PTX it may emit depends on it): the real assembler answers.
for a in "$@"; do case "$a" in --version|-V) exec {real} "$@";; esac; done
# Any other call assembles one kernel into the file after -o: it is left empty, never loaded.
out=; prev=
for a in "$@"; do [ "$prev" = -o ] && out=$a; prev=$a; done
[ -n "$out" ] && : > "$out"
exit 0
"""


def cuda_root() -> Path | None:
    """The CUDA folder JAX hands XLA (``bin/ptxas`` and ``nvvm/libdevice``): the compiler wheel's."""
    from jax._src import lib  # JAX's own search (CUDA_ROOT, then the nvidia compiler wheels); jax is pinned

    path = getattr(lib, "cuda_path", None)
    return Path(path) if path and (Path(path) / "bin" / "ptxas").is_file() else None


@functools.cache
def unassembled_cuda_root() -> str | None:
    """This process's folder whose ``ptxas`` assembles nothing (removed when the process ends), or
    None where there is no real one to answer the version, or the stand-in cannot run (no
    ``/bin/sh``, a temporary folder mounted noexec): XLA then assembles."""
    real = cuda_root()
    if real is None or not (real / "nvvm").is_dir():
        return None
    folder = Path(tempfile.mkdtemp(prefix="calc-cuda-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    (folder / "bin").mkdir()
    (folder / "nvvm").symlink_to(real / "nvvm", target_is_directory=True)
    ptxas = folder / "bin" / "ptxas"
    ptxas.write_text(_PTXAS.format(real=shlex.quote(str(real / "bin" / "ptxas"))))
    ptxas.chmod(0o755)
    try:  # no /bin/sh, or a temporary folder mounted noexec: XLA would find no assembler it can run
        subprocess.run([str(ptxas), "--version"], capture_output=True, timeout=60, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return str(folder)


# The kernel name the stopping cache holds: XLA's name uniquer changes it (its spaces, the colon), so
# XLA refuses the cache with an error that quotes it.
STOP_MARK = "calc: a plan stops after XLA's buffer assignment"


@functools.cache
def stopping_cache() -> str:
    """This process's kernel cache file that XLA refuses (removed when the process ends): a
    ``CompilationCacheProto`` with one entry, named ``STOP_MARK``, and no kernel."""
    key = STOP_MARK.encode()
    entry = b"\x0a" + bytes([len(key)]) + key + b"\x12\x00"  # entries { key: STOP_MARK, value {} }
    folder = Path(tempfile.mkdtemp(prefix="calc-stop-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    path = folder / "kernels.pb"
    path.write_bytes(b"\x0a" + bytes([len(entry)]) + entry)
    return str(path)


def stopped(exc: BaseException) -> bool:
    """Whether a compile failed where the stopping cache stops it (after the dumped assignment)."""
    return STOP_MARK in str(exc)


# How much of XLA's code generation a plan's compile runs: none (it stops before the first kernel,
# where it dumps the assignment), the kernels unoptimised and unassembled, or all of it.
Codegen = Literal["none", "unoptimised", "full"]
CODEGEN: tuple[Codegen, ...] = ("none", "unoptimised", "full")


def compiler_options(codegen: Codegen = "none") -> dict[str, str | int]:
    """The plan's compile options: for ``"none"`` and ``"unoptimised"`` no LLVM optimisation and XLA's
    CUDA folder the one that assembles nothing (where it can run), for ``"none"`` the kernel cache
    that stops the compile before the first kernel too; none for ``"full"`` (XLA's machine code as
    for running it)."""
    if codegen == "full":
        return {}
    root = unassembled_cuda_root()
    return {"xla_backend_optimization_level": 0, **({"xla_gpu_cuda_data_dir": root} if root else {}),
            **({"xla_gpu_kernel_cache_file": stopping_cache()} if codegen == "none" else {})}
