"""Forked worker processes, and length-prefixed frames over a pipe each way."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from typing import BinaryIO

from streameval.errors import InputError


class Frames:
    """Length-prefixed byte strings over a pipe."""

    def __init__(self, inbox: BinaryIO | None, outbox: BinaryIO | None) -> None:
        self.inbox, self.outbox = inbox, outbox

    def receive(self) -> bytes:
        """The next frame; EOFError when the other end has gone."""
        assert self.inbox is not None
        head = self.inbox.read(8)
        size = int.from_bytes(head, "little")
        frame = self.inbox.read(size) if len(head) == 8 else b""
        if len(head) < 8 or len(frame) < size:
            raise EOFError("the other end of the pipe went away")
        return frame

    def send(self, frame: bytes) -> None:
        """Writes the frame (an OSError, BrokenPipeError, when the other end has gone)."""
        assert self.outbox is not None
        self.outbox.write(len(frame).to_bytes(8, "little"))
        self.outbox.write(frame)
        self.outbox.flush()


class Worker(Frames):
    """A forked process running ``work(frames)``, frames a pipe each way to this process."""

    def __init__(self, pid: int, inbox: BinaryIO, outbox: BinaryIO) -> None:
        super().__init__(inbox, outbox)
        self.pid: int | None = pid

    @classmethod
    def start(cls, work: Callable[[Frames], None], others: list[Worker]) -> Worker | None:
        """The worker, or None when no process can be forked."""
        if not hasattr(os, "fork"):  # not on Windows
            return None
        from_worker, to_main = os.pipe()
        from_main, to_worker = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            for fd in (to_main, from_worker, from_main, to_worker):
                os.close(fd)
            return None
        if pid == 0:  # the worker: it ends here, whatever happens, without the main process's exit work
            code = 1
            try:
                for other in others:  # its pipes to the workers before it are not this one's
                    for stream in (other.inbox, other.outbox):
                        if stream is not None:
                            os.close(stream.fileno())
                os.close(from_worker)
                os.close(to_worker)
                with os.fdopen(from_main, "rb") as inbox, os.fdopen(to_main, "wb") as outbox:
                    work(Frames(inbox, outbox))
                code = 0
            except (KeyboardInterrupt, OSError, EOFError, InputError):
                pass  # stopped, the main process went away, or a file it reads again and reports
            except BaseException as exc:  # a bug: said, and the main process goes on alone
                sys.stderr.write(f"streameval replay: a worker failed ({type(exc).__name__}: {exc})\n")
            finally:
                os._exit(code)
        os.close(to_main)
        os.close(from_main)
        return cls(pid, os.fdopen(from_worker, "rb"), os.fdopen(to_worker, "wb"))

    def stop(self) -> None:
        for stream in (self.inbox, self.outbox):
            if stream is not None:
                try:
                    stream.close()
                except OSError:  # a write to a worker that had gone
                    pass
        self.inbox = self.outbox = None
        if self.pid is not None:
            os.kill(self.pid, signal.SIGKILL)  # done, or not needed any more
            os.waitpid(self.pid, 0)
            self.pid = None
