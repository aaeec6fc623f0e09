"""`interruptible()` never loses an interrupt: one that Python swallows (a weakref callback, a `__del__`, a gc
callback was running when the handler ran) is delivered again, whatever the delay and the machine's load;
a repeat of the same request (group delivery, torchrun's forward) is coalesced; the user's second Ctrl-C
ends the process at once. The cases with a terminal's signals run in a child interpreter of their own."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from sglang_eagle3_ext.interrupts import COALESCE_S

CHILD = r"""
import gc, os, signal, sys, time, weakref
from sglang_eagle3_ext.interrupts import interruptible

mode, marker = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else ""

def interrupt_self(*_):  # os.kill runs the handler before it returns: here, inside the callback
    os.kill(os.getpid(), signal.SIGINT)

class Finalized:
    def __del__(self):
        interrupt_self()

class Busy:  # its finalizers hold the main thread most of the time
    def __del__(self):
        sum(range(300))

def busy(*_):
    sum(range(300))

def in_weakref_callback():
    class T:
        pass
    t = T()
    r = weakref.ref(t, interrupt_self)
    del t

def in_del():
    Finalized()

def interrupt_at_start(phase, info):  # gc calls back at its start and its stop: one signal, as one Ctrl-C
    if phase == "start":
        interrupt_self()

def in_gc_callback():
    gc.callbacks.append(interrupt_at_start)
    try:
        gc.collect()
    finally:
        gc.callbacks.remove(interrupt_at_start)

def storm():
    # the signal lands wherever it lands; once the marker exists the signal was sent before (and so delivered
    # to this process: at the latest when the stat that saw the marker returned): the storm ends a little later
    gc.callbacks.append(busy)
    try:
        seen, i = 0, 0
        while seen < 50:
            i += 1
            Busy()
            class T:
                pass
            t = T()
            r = weakref.ref(t, busy)
            del t
            if i % 64 == 0:
                gc.collect()
            if seen or (i % 8 == 0 and os.path.exists(marker)):
                seen += 1
    finally:
        gc.callbacks.remove(busy)

def blocking_read():
    os.read(0, 1)  # the test closes stdin after the signal: EOF here means the signal was lost

def cleanup_forever():
    try:
        print("working", flush=True)
        while True:
            time.sleep(0.01)
    finally:
        print("cleaning", flush=True)
        time.sleep(30)  # a long cleanup: only a second interrupt ends it early
        print("cleaned", flush=True)

try:
    with interruptible("train") as stop:
        print("ready", flush=True)
        globals()[mode]()
        until = time.monotonic() + 30  # the run goes on: a lost interrupt ends it here, an interrupt at once
        while time.monotonic() < until:
            time.sleep(0.001)
        print("lost", flush=True)
        sys.exit(1)
except KeyboardInterrupt:
    print(f"train: interrupted; by signal {stop.received}", flush=True)
    sys.exit(130)
"""


def _start(tmp_path, mode: str) -> tuple[subprocess.Popen, str]:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    marker = str(tmp_path / "sent")
    p = subprocess.Popen(
        [sys.executable, str(script), mode, marker],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    assert p.stdout.readline() == "ready\n"
    return p, marker


def _finish(p: subprocess.Popen) -> str:
    """The rest of the child's output (read through the same buffered stream as its first lines), stdin closed
    first: the blocking read's end of file. The timer is hang protection only: nothing here waits on the clock."""
    if p.stdin:
        p.stdin.close()
    killer = threading.Timer(120, os.killpg, (p.pid, signal.SIGKILL))
    killer.start()
    try:
        out = p.stdout.read()
        p.wait()
    finally:
        killer.cancel()
    return out


@pytest.mark.parametrize("mode", ["in_weakref_callback", "in_del", "in_gc_callback"])
def test_an_interrupt_raised_where_python_ignores_exceptions_still_stops_the_command(tmp_path, mode):
    p, _ = _start(tmp_path, mode)
    out = _finish(p)
    assert p.returncode == 130, out
    assert out.count("interrupted") == 1 and f"by signal {int(signal.SIGINT)}" in out, out
    assert "Exception ignored" not in out and "Traceback" not in out, out


ENDS_AT_ONCE = r"""
import os, signal, sys, time, weakref
from sglang_eagle3_ext.interrupts import interruptible

def interrupt_self(*_):
    os.kill(os.getpid(), signal.SIGINT)

class T:
    pass

try:
    with interruptible("train") as stop:
        t = T()
        r = weakref.ref(t, interrupt_self)
        del t  # swallowed in the callback; the block ends before the interrupt is raised again
except KeyboardInterrupt:
    print(f"train: interrupted; by signal {stop.received}", flush=True)
    sys.exit(130)
time.sleep(2)  # outside every handler of the command: an interrupt raised here would kill the process
print("finished", flush=True)
"""


@pytest.mark.parametrize("load", [False, True])
def test_an_interrupt_swallowed_just_before_the_block_ends_is_raised_as_it_ends_never_after(tmp_path, load, request):
    """The command's handler sees it; nothing reaches the code after the block, where Python would die by the
    signal (exit -2) after the command had said its line."""
    if load:
        request.getfixturevalue("cpu_hog")
    script = tmp_path / "child.py"
    script.write_text(ENDS_AT_ONCE)
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 130, (p.returncode, p.stdout, p.stderr)
    assert p.stdout.count("interrupted") == 1 and "finished" not in p.stdout, p.stdout
    assert "Exception ignored" not in p.stderr and "Traceback" not in p.stderr, p.stderr


@pytest.fixture
def cpu_hog():
    """Busy processes for the test's duration: four per core, the load a shared CI machine may have."""
    hogs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
        for _ in range(4 * (os.cpu_count() or 1))
    ]
    yield
    for h in hogs:
        h.kill()
        h.wait()


@pytest.mark.parametrize("delay", [0.0, 0.003, 0.02, 0.1])
@pytest.mark.parametrize("mode", ["storm", "blocking_read"])
def test_an_interrupt_at_any_moment_stops_the_command_under_load(tmp_path, cpu_hog, mode, delay):
    """No bound on time: the child itself tells a lost signal (its work ends without one, exit 1), so the
    verdict does not depend on the machine's load."""
    p, marker = _start(tmp_path, mode)
    time.sleep(delay)
    os.kill(p.pid, signal.SIGINT)
    open(marker, "w").close()
    out = _finish(p)
    assert p.returncode == 130, out
    assert out.count("interrupted") == 1 and "Exception ignored" not in out and "Traceback" not in out, out


def test_a_repeat_of_the_same_request_is_one_interrupt_and_a_second_ctrl_c_ends_it_at_once(tmp_path):
    """SIGINT then SIGTERM at once (torchrun's forward, a group's delivery): one request, the cleanup runs on;
    Ctrl-C again later: the process ends before its cleanup does, one line, exit 130."""
    p, _ = _start(tmp_path, "cleanup_forever")
    assert p.stdout.readline() == "working\n"
    os.kill(p.pid, signal.SIGINT)
    os.kill(p.pid, signal.SIGTERM)
    assert p.stdout.readline() == "cleaning\n"
    time.sleep(COALESCE_S + 0.5)  # later than the window, measured from when the cleanup began
    assert p.poll() is None, "the repeat ended the cleanup"
    os.kill(p.pid, signal.SIGINT)
    out = _finish(p)
    assert p.returncode == 130, out
    said = [ln for ln in out.splitlines() if "interrupted" in ln]
    assert len(said) == 1 and re.search(r"train\S*: interrupted again; stopped at once", said[0]), out
    assert "cleaned" not in out and "Traceback" not in out, out


def test_sigterm_while_dump_run_waits_for_the_server_is_one_line_and_exit_130(tmp_path):
    """Every long command runs under `interruptible`: SIGTERM (a scheduler's stop) is an interrupt there, not a
    silent kill; here `dump run` blocked in its first request to a server that accepts and never answers."""
    data = tmp_path / "d.jsonl"
    data.write_text('{"id": "a", "input_ids": [1, 2]}\n')
    (tmp_path / "dump").mkdir()
    (tmp_path / "dump" / "dump_meta.json").write_text("{}")
    with socket.create_server(("127.0.0.1", 0)) as srv:
        url = f"http://127.0.0.1:{srv.getsockname()[1]}"
        argv = ["dump", "run", "--url", url, "--data", str(data), "--dump-dir", str(tmp_path / "dump")]
        p = subprocess.Popen(
            [sys.executable, "-m", "sglang_eagle3_ext", *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        srv.settimeout(120)
        conn, _ = srv.accept()  # its request is on the way: it waits for the reply
        with conn:
            p.send_signal(signal.SIGTERM)
            out = _finish(p)
    assert p.returncode == 130, out
    said = [ln for ln in out.splitlines() if "interrupted" in ln]
    assert len(said) == 1 and "dump run: interrupted; the samples written so far" in said[0], out
    assert "Traceback" not in out, out


def test_a_signal_while_the_block_end_waits_for_a_delivery_thread_is_not_raised_into_the_cleanup():
    """The block's end waits for a thread that is simulating a swallowed interrupt; a real signal arriving then
    runs the handler inside that wait. Raised there, it would cut the block's cleanup short (its handlers left
    installed); the handler sees the block closed and returns."""
    from sglang_eagle3_ext.interrupts import _Delivery

    delivery, seen, holding = _Delivery(), [], threading.Event()

    def handler(signum, frame):
        seen.append(delivery.closed)
        if not delivery.closed:  # as interruptible's handler does with a swallowed interrupt still owed
            raise KeyboardInterrupt

    def hold_the_lock_then_signal():
        with delivery.lock:
            holding.set()
            time.sleep(0.2)  # the main thread is waiting in close() by now
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
            time.sleep(0.05)

    old = signal.signal(signal.SIGINT, handler)
    try:
        threading.Thread(target=hold_the_lock_then_signal).start()
        holding.wait()
        delivery.close()
        _touch()  # a Python call: any handler still pending runs here
    finally:
        signal.signal(signal.SIGINT, old)
    assert seen == [True]


def _touch() -> None:
    pass
