"""Test-only (tests/real): on the PYTHONPATH of this lane's CPU SGLang servers, SGLang's children start by fork.

SGLang sets the "spawn" start method (sglang/srt/entrypoints/engine.py, `_set_envs_and_config`), so its scheduler
and detokenizer each start a fresh interpreter and import torch and SGLang again (about 10 s of CPU each here),
although the launcher has imported all of it already. On CPU with one OpenMP thread (BASE_ENV) a forked child runs
the same code in the same environment; it inherits the plugins and hooks the launcher loaded instead of loading them
again (SGLang's load_plugins runs once per process). This saves about 20 s of CPU per launch. The CUDA lane keeps
spawn (CUDA cannot be forked), and so does every process without SGLANG_USE_CPU_ENGINE=1 and every launch with
engine.Launch.spawn_children (this file is left out of its path).
"""

import multiprocessing
import os
import sys

FORKED = "sparkgate tests/real: SGLang's children start by fork (tests/real/stand_ins/sitecustomize.py)"

# Only as Python's own sitecustomize: the lane imports FORKED from here without the switch.
if __name__ == "sitecustomize" and os.environ.get("SGLANG_USE_CPU_ENGINE") == "1":
    _set_start_method = multiprocessing.set_start_method

    def _set_start_method_fork(method, force=False):
        if method == "spawn":
            print(FORKED, file=sys.stderr, flush=True)  # into the server's log: engine.RealEngine.children_forked
            method = "fork"
        _set_start_method(method, force=force)

    multiprocessing.set_start_method = _set_start_method_fork
