"""Where llama.cpp's shared libraries are: the ``lib`` folder of the installed llama_cpp
package (libllama, ggml-base and the per-CPU ggml-cpu variants), for the CPU probe
(``native_probe``) and the calls Hearth makes into ggml itself (``weight_kernels``)."""

from __future__ import annotations

from pathlib import Path


def lib_dir() -> Path:
    import llama_cpp

    return Path(llama_cpp.__file__).resolve().parent / "lib"
