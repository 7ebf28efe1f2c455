"""The pipes between a worker pool (``_workers``) and its workers, safe from Ctrl-C.

A signal handler's ``KeyboardInterrupt`` lands where the main thread checks for signals:
after a call returns (the call's value is then dropped) and at a Python function's entry,
in ``multiprocessing``'s code too. A message half sent leaves the worker reading garbage;
one sent and taken for unsent leaves a worker filling a slot that the pool lends again;
one read and then dropped leaves the loader waiting forever. So:

* The loader sends in frames of at most ``limit`` bytes (one socket buffer each: a frame
  is written whole or not at all), each by one non-blocking send that never waits, so no
  signal is checked inside it: an interrupt finds a frame either sent (it lands after the
  send) or not. A message of several frames counts once its last frame is sent; the
  worker drops the frames of a message whose last frame never came when the next begins.
* A thread of the pool reads what the workers send (signals reach only the main thread)
  and records each message before it wakes the thread that waits: an interrupt in that
  wait loses nothing.

A frame is Connection's framing (a 4-byte length) around ``kind`` (``PART`` or ``LAST``),
the message's token (8 bytes, unique in the pool), the piece's index (4 bytes; index 0
begins a message, so a message sent again after an interrupt starts over) and a piece
of the pickled message.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from typing import Any

PART, LAST = b"P", b"L"
_HEAD = 4 + 1 + 8 + 4  # the length, the kind, the token and the index
# A unix socket writes a frame of up to 32 KiB as one buffer (Linux: one skb), whole or
# not at all; the socket's own buffer may be smaller.
_MOST = 32 << 10
_FIRST = struct.pack("!I", 0)
# What the reader thread reads at a time (more for the rest of a larger message).
_CHUNK = 1 << 16


class Worker:
    """One worker process and the pipe to it: ``sock`` sends (frames), ``conn`` receives
    (the pool's ``Reader``); ``told`` counts the pool's control messages it was sent."""

    def __init__(self, payload: bytes) -> None:
        parent, child = socket.socketpair()
        parent.settimeout(None)  # a default timeout would wait (and take signals) in send
        env = dict(os.environ)
        # The worker imports feedline as the parent does (an installed or source tree).
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "feedline.loader._worker_main", str(child.fileno())],
            pass_fds=(child.fileno(),),
            env=env,
            stdin=subprocess.DEVNULL,
            start_new_session=False,
        )
        child.close()
        self.sock = parent
        self.conn = Connection(os.dup(parent.fileno()))
        self.limit = frame_limit(parent)
        self.told = 0
        self.conn.send_bytes(payload)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def describe_death(self) -> str:
        code = self.proc.poll()
        if code is None:
            return "is running"
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"was killed by {name}"
        return f"exited with status {code}"

    def close(self) -> None:
        for end in (self.conn, self.sock):
            with contextlib.suppress(Exception):
                end.close()


def frame_limit(sock: socket.socket) -> int:
    """The largest frame ``sock`` writes whole."""
    return max(_HEAD + 1024, min(_MOST, sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) // 4))


def frames(token: int, data: bytes, limit: int) -> list[bytes]:
    """``data`` (a pickled message) in frames of at most ``limit`` bytes, the last one
    marked ``LAST``."""
    step = limit - _HEAD
    tag = token.to_bytes(8, "big")
    if len(data) <= step:  # most messages: one frame
        return [struct.pack("!i", _HEAD - 4 + len(data)) + LAST + tag + _FIRST + data]
    view = memoryview(data)
    pieces = [view[i : i + step] for i in range(0, len(data), step)]
    out = []
    for i, piece in enumerate(pieces):
        kind = LAST if i == len(pieces) - 1 else PART
        out.append(
            struct.pack("!i", _HEAD - 4 + len(piece)) + kind + tag + struct.pack("!I", i) + piece
        )
    return out


def message(token: int, msg: tuple, limit: int) -> list[bytes]:
    return frames(token, pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL), limit)


def send_frame(sock: socket.socket, frame: bytes, alive: Callable[[], bool]) -> None:
    """Send ``frame``, waiting while the pipe is full (``OSError`` if the worker died).
    An interrupt finds it sent or not; the caller sends it again if it must be sure
    (only messages that mean the same twice go this way)."""
    while True:
        try:
            n = sock.send(frame, socket.MSG_DONTWAIT)
        except BlockingIOError:
            wait_writable(sock, alive)
            continue
        if n < len(frame):  # not on Linux: a frame is written whole
            sock.sendall(frame[n:])
        return


def wait_writable(sock: socket.socket, alive: Callable[[], bool]) -> None:
    """Wait until ``sock`` has room (its worker reads its tasks in turn)."""
    while not select.select([], [sock], [], 0.5)[1]:
        if not alive():
            raise BrokenPipeError("the worker is gone")


def received(conn: Connection) -> Iterator[tuple[int, Any]]:
    """In a worker: the loader's messages, with their tokens, from its frames."""
    parts: list[memoryview] = []
    token = b""
    while True:
        raw = conn.recv_bytes()
        index = struct.unpack_from("!I", raw, 9)[0]
        if index == 0 or raw[1:9] != token:  # a new message: one never finished goes
            parts, token = [], raw[1:9]
        if index != len(parts):  # a piece of a message that was not finished
            continue
        parts.append(memoryview(raw)[13:])
        if raw[:1] == LAST:
            data = parts[0] if len(parts) == 1 else b"".join(parts)
            parts, token = [], b""
            yield int.from_bytes(raw[1:9], "big"), pickle.loads(data)


def recorder(pending: dict, done: dict, times: dict) -> Callable[[tuple], None]:
    """What the reader thread does with a worker's message: the batch's result recorded
    (its times first: ``result`` may forget the batch as soon as it is done), if the
    batch is pending for that very task."""

    def record(msg: tuple) -> None:
        kind, batch_no = msg[0], msg[1]
        entry = pending.get(batch_no)
        if entry is None or entry[2] != msg[2]:
            return  # not this batch's task (every task sent is pending: never seen)
        if kind == "done":  # with the ragged columns' places, and the room they needed
            times[batch_no] = msg[6]
            done[batch_no] = ("done", (msg[4], msg[5]))
        elif kind == "result":
            times[batch_no] = msg[4]
            done[batch_no] = ("result", msg[3])
        else:
            done[batch_no] = ("error", (msg[3], msg[4]))

    return record


class Reader:
    """A thread that reads every worker's messages and hands each, unpickled, to
    ``record`` (on that thread), then wakes ``wait``. A worker whose pipe ends (it died,
    or the pool closed) goes in ``lost``."""

    def __init__(self) -> None:
        self.lost: list[Any] = []
        self.ready = threading.Lock()  # released when a message came
        self.ready.acquire()
        self._stop_r, self._stop_w = os.pipe()
        self.thread: threading.Thread | None = None

    def start(self, workers: list, record: Callable[[tuple], None]) -> None:
        self.thread = threading.Thread(
            target=_read,
            args=(list(workers), record, self.lost, self.ready, self._stop_r),
            name="feedline worker results",
            daemon=True,
        )
        self.thread.start()

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a message (True if one may have come)."""
        return self.ready.acquire(timeout=timeout)

    def stop(self) -> None:
        """Stop the thread (before the pipes close: it must not read a reused fd)."""
        with contextlib.suppress(OSError):
            os.write(self._stop_w, b"x")
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join(5.0)
        for fd in (self._stop_r, self._stop_w):
            with contextlib.suppress(OSError):
                os.close(fd)


def _wake(ready: threading.Lock) -> None:
    with contextlib.suppress(RuntimeError):  # already released: a wake-up is due
        ready.release()


def _read(
    workers: list, record: Callable[[tuple], None], lost: list, ready: threading.Lock, stop: int
) -> None:
    poller = select.poll()
    by_fd = {w.conn.fileno(): w for w in workers}
    bufs = {fd: bytearray() for fd in by_fd}
    want = dict.fromkeys(by_fd, _CHUNK)  # what to read next (a message's rest, if larger)
    for fd in by_fd:
        poller.register(fd, select.POLLIN)
    poller.register(stop, select.POLLIN)
    try:
        while by_fd:
            for fd, _ in poller.poll():
                if fd == stop:
                    return
                w = by_fd.get(fd)
                if w is None:
                    continue
                try:
                    data = os.read(fd, want[fd])
                    if not data:
                        raise EOFError
                    bufs[fd] += data
                    want[fd] = max(_CHUNK, _complete(bufs[fd], record))
                except Exception:  # EOF or a broken pipe: the worker is gone
                    poller.unregister(fd)
                    del by_fd[fd]
                    lost.append(w)
                _wake(ready)
    finally:
        _wake(ready)


def _complete(buf: bytearray, record: Callable[[tuple], None]) -> int:
    """Record the messages complete in ``buf`` (Connection's framing), and take them out
    of it; the bytes still missing of the next one."""
    start, end = 0, len(buf)
    while end - start >= 4:
        (n,) = struct.unpack_from("!i", buf, start)
        head = 4
        if n == -1:  # a message of 2 GiB or more
            if end - start < 12:
                break
            (n,) = struct.unpack_from("!Q", buf, start + 4)
            head = 12
        if end - start < head + n:
            del buf[:start]
            return head + n - (end - start)
        record(pickle.loads(buf[start + head : start + head + n]))
        start += head + n
    del buf[:start]
    return 0
