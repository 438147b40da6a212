"""Log output in SGLang's shape: `[YYYY-mm-dd HH:MM:SS] msg` (main process) and
`[YYYY-mm-dd HH:MM:SS TP0] msg` (scheduler), one flushed line at a time so a log follower sees each
line the moment it is written. Uvicorn's access lines keep uvicorn's own `INFO:     ` prefix."""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO


class EngineLog:
    def __init__(self, out: TextIO | None = None, err: TextIO | None = None):
        self._out = out or sys.stdout
        self._err = err or sys.stderr
        self._lock = threading.Lock()

    def _write(self, stream: TextIO, text: str) -> None:
        with self._lock:
            stream.write(text if text.endswith("\n") else text + "\n")
            stream.flush()

    @staticmethod
    def _stamp(scheduler: bool) -> str:
        now = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())
        return f"[{now} TP0]" if scheduler else f"[{now}]"

    def info(self, message: str) -> None:
        """A main-process (tokenizer / HTTP server) line."""
        self._write(self._out, f"{self._stamp(False)} {message}")

    def scheduler(self, message: str) -> None:
        """A scheduler-process line (model runner, CUDA graphs, decode stats)."""
        self._write(self._out, f"{self._stamp(True)} {message}")

    def access(self, client: str, method: str, path: str, status: int, phrase: str) -> None:
        self._write(self._out, f'INFO:     {client} - "{method} {path} HTTP/1.1" {status} {phrase}')

    def raw(self, text: str) -> None:
        self._write(self._out, text)

    def traceback(self, text: str) -> None:
        """Python tracebacks go to stderr, as an uncaught exception's would."""
        self._write(self._err, text)
