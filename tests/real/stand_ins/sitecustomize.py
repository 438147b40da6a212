"""Test-only (tests/real): on the PYTHONPATH of this lane's CPU SGLang processes, SGLang's children start by fork.

SGLang sets the "spawn" start method (sglang/srt/entrypoints/engine.py, `_set_envs_and_config`), so its scheduler
and detokenizer each start a fresh interpreter and import torch and SGLang again (about 10 s of CPU each here),
although the launcher has imported all of it already. On CPU with one OpenMP thread (BASE_ENV) a forked child is
the same code with the same environment and plugins. This saves about 20 s of CPU per launch; the CUDA lane keeps
spawn (CUDA cannot be forked), and so does every launch without SGLANG_USE_CPU_ENGINE=1.
"""

import multiprocessing
import os

if os.environ.get("SGLANG_USE_CPU_ENGINE") == "1":
    _set_start_method = multiprocessing.set_start_method

    def _set_start_method_fork(method, force=False):
        _set_start_method("fork" if method == "spawn" else method, force=force)

    multiprocessing.set_start_method = _set_start_method_fork
