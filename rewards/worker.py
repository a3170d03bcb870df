"""Reward code in a child process, under a wall-clock limit that code cannot escape.

math-verify bounds its sympy calls with SIGALRM timers but runs its extraction regexes with
`re`, which checks no signals while it scans: on `"\\(" * n` one parse takes time quadratic in
n (about 40 s at the 65,536 characters the scorer reads), and no timer in the process stops
that scan. Ending the process does. So a function decorated `@isolated(...)` runs in one
child process (`rewards.worker.serve` in a fresh interpreter: no fork of a process that holds
threads or CUDA), started at the first call and kept; a call that gives no value within
its `seconds()` kills the child (the next call starts another) and raises TimeoutError. The child
runs each call in its main thread, where math-verify's own timers work, whichever thread asked.
Requests and replies are JSON lines (module, function name, arguments; value or error): nothing
is unpickled. The first call into a module also imports it there, without the limit.
"""

from __future__ import annotations

import atexit
import builtins
import contextlib
import functools
import hashlib
import importlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])
START_SECONDS = 300.0  # starting the child and importing a module there (sympy: seconds on a busy machine)
REMEMBERED_TIMEOUTS = 256
_inside = False  # True in the child: decorated functions run in place


def isolated(seconds: Callable[[], float], imports: tuple[str, ...] = ()) -> Callable[[F], F]:
    """Run the decorated module-level function (JSON arguments and value) in the worker,
    TimeoutError after `seconds()` (read at each call: a module's constant, say). Its module,
    and `imports` where installed (what it imports as it runs), are imported there first."""

    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def call(*args: Any) -> Any:
            if _inside:
                return fn(*args)
            return _WORKER.call(fn.__module__, fn.__qualname__, list(args), seconds(), imports)

        return call  # type: ignore[return-value]

    return wrap


class Worker:
    """The parent's handle on the child: one call at a time, whichever thread makes it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen | None = None
        self._pid = 0  # the process that started the child: a forked copy of the parent starts its own
        self._imported: set[str] = set()
        # a request's digest -> the limit it ran past: asked again (the scorer retries a failing
        # batch item by item; a collapsed group repeats one completion), it fails at once
        self._timed_out: OrderedDict[bytes, float] = OrderedDict()

    def call(self, module: str, name: str, args: list, seconds: float, imports: tuple[str, ...] = ()) -> Any:
        request = _request(module, name, args)
        digest, what = hashlib.sha256(request).digest(), f"{module}.{name}"
        with self._lock:
            if self._timed_out.get(digest, -1.0) >= seconds:
                raise TimeoutError(f"{what} gave no value in {self._timed_out[digest]:g} s (these arguments, before)")
            if self._process is None or self._process.poll() is not None or self._pid != os.getpid():
                self._start()
            for needed in (module, *imports):
                if needed not in self._imported:
                    self._ask(_request(needed, None, []), START_SECONDS, f"importing {needed}")
                    self._imported.add(needed)
            try:
                return self._ask(request, seconds, what)
            except TimeoutError:
                self._timed_out[digest] = seconds
                if len(self._timed_out) > REMEMBERED_TIMEOUTS:
                    self._timed_out.popitem(last=False)
                raise

    def _start(self) -> None:
        path = os.pathsep.join(entry for entry in sys.path if entry)  # it imports what this process can
        self._process = subprocess.Popen(
            [sys.executable, "-c", "from rewards.worker import serve; serve()"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": path},
        )
        self._pid = os.getpid()
        self._imported = set()

    def _ask(self, request: bytes, seconds: float, what: str) -> Any:
        process = self._process
        assert process is not None and process.stdin is not None and process.stdout is not None
        try:
            process.stdin.write(request)
            process.stdin.flush()
            ready, _, _ = select.select([process.stdout], [], [], seconds)
            line = process.stdout.readline() if ready else None
        except BrokenPipeError:
            line = b""
        if not line:
            self._stop()
            if line is None:
                raise TimeoutError(f"{what} gave no value in {seconds:g} s: its worker process was ended")
            raise RuntimeError(f"{what}: the reward worker process ended (exit {process.returncode})")
        ok, value = json.loads(line)
        if ok:
            return value
        kind, message = value
        error = getattr(builtins, kind, None)
        if not (isinstance(error, type) and issubclass(error, Exception)):
            error, message = RuntimeError, f"{kind}: {message}"
        raise error(message)

    def _stop(self) -> None:
        if self._process is not None:
            _end(self._process, grace=0.0)
        self._process = None

    def close(self) -> None:
        """At exit: the child reads the end of its input and ends; one still busy is killed."""
        process, self._process = self._process, None
        if process is not None and self._pid == os.getpid():
            _end(process, grace=2.0)


def _request(module: str, name: str | None, args: list) -> bytes:
    """One request line: a call of module.name(*args), or with name None an import of module."""
    return json.dumps([module, name, args]).encode() + b"\n"


def _end(process: subprocess.Popen, grace: float) -> None:
    """Close the child's input, give it `grace` seconds to end, kill it past them."""
    for pipe in (process.stdin, process.stdout):
        with contextlib.suppress(OSError):
            pipe.close()  # type: ignore[union-attr]
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


_WORKER = Worker()
atexit.register(_WORKER.close)


def serve() -> None:
    """The child: answer requests from stdin until it closes. What the code run here prints
    goes to stderr, so that only replies reach the parent."""
    global _inside
    _inside = True
    replies = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's: it ends the child
    for line in sys.stdin:
        module, name, args = json.loads(line)
        try:
            if name is None:  # an import ahead of the calls, not under their limit
                with contextlib.suppress(ImportError):  # missing: the call itself says how to install it
                    importlib.import_module(module)
                reply = json.dumps([True, None])
            else:
                reply = json.dumps([True, getattr(importlib.import_module(module), name)(*args)])
        except Exception as err:
            reply = json.dumps([False, [type(err).__name__, str(err)]])
        replies.write(reply + "\n")
        replies.flush()
