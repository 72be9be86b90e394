"""ProcessLock: a child forked while another thread holds the lock finds it free and its state reset."""

from __future__ import annotations

import os
import threading

import pytest

from datasets_hub.process_locks import ProcessLock

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="fork() is POSIX only")

guarded = {"holders": 0}  # state a ProcessLock guards, reset in a child
unguarded = {"holders": 0}  # the same under a plain threading.Lock
lock = ProcessLock(reset_in_child=lambda: guarded.update(holders=0))
plain = threading.Lock()


def _fork_while_held(guard, state: dict) -> tuple[bool, int]:
    """Fork while a second thread holds ``guard`` (and counts itself in ``state``). The child's answer: whether
    it got the lock within a second, and the count it sees."""
    held, release = threading.Event(), threading.Event()

    def hold():
        with guard:
            state["holders"] += 1
            held.set()
            release.wait(30)
            state["holders"] -= 1

    thread = threading.Thread(target=hold)
    thread.start()
    assert held.wait(30)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report through the pipe and leave at once (no pytest exit handlers)
        os.close(read_end)
        got = guard.acquire(timeout=1) if guard is plain else guard.locked() is False
        os.write(write_end, f"{int(got)} {state['holders']}".encode())
        os._exit(0)
    os.close(write_end)
    try:
        with os.fdopen(read_end) as pipe:
            got, holders = pipe.read().split()
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        release.set()
        thread.join(30)
    return bool(int(got)), int(holders)


def test_a_forked_child_finds_the_lock_free_and_the_guarded_state_reset():
    assert _fork_while_held(lock, guarded) == (True, 0)
    with lock:  # the parent's lock works as before: its own thread released it
        assert guarded["holders"] == 0


def test_a_plain_lock_held_at_fork_stays_held_in_the_child():
    # the failure ProcessLock exists for: the child's copy of a held threading.Lock is never released
    assert _fork_while_held(plain, unguarded) == (False, 1)
