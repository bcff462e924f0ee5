"""The machine code a plan's compile skips: XLA's kernels are neither optimised by LLVM nor assembled.

XLA's GPU compiler assigns every buffer of the step (what ``memory_analysis()`` reports) after its
HLO passes, before it emits code; then it lowers each kernel to LLVM, optimises it into PTX and runs
``ptxas`` on it, one process a kernel (250 for ResNet50's step). A plan never runs: the
compile-only client keeps the machine code and loads it nowhere. So the plan's compile asks LLVM
for no optimisation (``xla_backend_optimization_level`` 0: LLVM's pipeline only, after the buffers
are assigned) and points XLA at a folder whose ``bin/ptxas`` answers XLA's version question with
the real assembler and writes an empty file for each kernel; ``nvvm`` (libdevice, which the PTX
needs) is the real one. The plan is the same to the byte (``benchmarks/xla_codegen.py`` compiles
configurations both ways and compares every byte and what fills the peak).
"""

from __future__ import annotations

import atexit
import functools
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

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


def compiler_options(full_codegen: bool = False) -> dict[str, str | int]:
    """The plan's compile options: no LLVM optimisation and XLA's CUDA folder the one that assembles
    nothing (where it can run), unless ``full_codegen`` (XLA's machine code as for running it)."""
    if full_codegen:
        return {}
    root = unassembled_cuda_root()
    return {"xla_backend_optimization_level": 0, **({"xla_gpu_cuda_data_dir": root} if root else {})}
