"""rewards/worker.py: reward code run in a child process under a wall-clock limit, which a scan
no signal interrupts cannot escape, and which hands back values, errors and nothing else."""

from __future__ import annotations

import os
import re
import threading

import pytest

from rewards.worker import isolated

LIMIT = 5.0


class OwnError(Exception):
    pass


@isolated(lambda: LIMIT)
def scan(text: str) -> bool:
    """A backtracking match `re` runs in C without checking for signals: years at 80 characters."""
    return re.match(r"(a|aa)*c", text) is not None


@isolated(lambda: LIMIT)
def where() -> list:
    print("noise on stdout")  # must not reach the replies
    return [os.getpid(), threading.current_thread() is threading.main_thread()]


@isolated(lambda: LIMIT)
def fail(kind: str) -> None:
    if kind == "value":
        raise ValueError("bad value 7")
    if kind == "own":
        raise OwnError("an error type that is no builtin")
    os._exit(3)  # the child dies


def test_a_scan_no_timer_stops_is_ended_at_the_limit_and_the_next_call_gets_a_new_worker(monkeypatch):
    assert scan("aac") is True  # the worker answers (and has imported this module)
    first = where()[0]
    monkeypatch.setattr(__import__(__name__), "LIMIT", 0.5)  # read at each call
    with pytest.raises(TimeoutError, match=r"scan gave no value in 0.5 s: its worker process was ended"):
        scan("a" * 80)
    second = where()[0]
    with pytest.raises(TimeoutError, match=r"scan gave no value in 0.5 s \(these arguments, before\)"):
        scan("a" * 80)  # asked again: refused at once, the worker kept
    assert where()[0] == second
    monkeypatch.setattr(__import__(__name__), "LIMIT", 5.0)
    assert second != first and second != os.getpid()  # another child, not this process
    assert scan("ab") is False


def test_calls_run_in_the_childs_main_thread_whichever_thread_asks():
    replies = []
    thread = threading.Thread(target=lambda: replies.append(where()))
    thread.start()
    thread.join()
    assert replies[0][0] != os.getpid() and replies[0][1] is True


def test_errors_come_back_with_their_type_and_message_and_a_dead_worker_is_replaced():
    with pytest.raises(ValueError, match="bad value 7"):
        fail("value")
    with pytest.raises(RuntimeError, match="OwnError: an error type that is no builtin"):
        fail("own")
    with pytest.raises(RuntimeError, match=r"the reward worker process ended \(exit 3\)"):
        fail("exit")
    assert scan("aac") is True


def test_a_forked_copy_of_this_process_starts_a_worker_of_its_own():
    """A fork (a data loader's worker, say) shares the parent's pipes: writing to the parent's
    worker from both would cross their replies."""
    parents_worker = where()[0]
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the copy: its worker's pid, then out without this process's exit handlers
        try:
            os.write(write, str(where()[0]).encode())
        finally:
            os._exit(0)
    os.close(write)
    childs_worker = int(os.read(read, 64).decode() or 0)
    os.waitpid(pid, 0)
    os.close(read)
    assert childs_worker not in (0, parents_worker, pid, os.getpid())
    assert where()[0] == parents_worker  # the parent's is untouched
