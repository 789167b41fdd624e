"""A TCP proxy for fault tests: forwards 127.0.0.1:<port> to a server, and on command adds
latency, blackholes traffic, refuses new connections, resets live ones, or cuts a connection
after N bytes, or
loses a server's replies (the request was applied; the client never hears). Runs an asyncio loop in a background thread; every mode is bounded by the test.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress


class FaultProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.latency = 0.0
        self.blackhole = False
        self.refuse = False
        self.cut_after: int | None = None
        self.lost_replies = 0
        """The server's next replies to drop, each with its connection (reset)."""
        self.passed_replies = 0
        """Replies to let through before dropping those: where in a call the loss falls."""
        self._writers: set[asyncio.StreamWriter] = set()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.port = 0
        self._thread.start()
        self._ready.wait(5)

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._server = server
        self._ready.set()
        self._loop.run_forever()
        # stopped: cancel the connections still piping and let them unwind, so that closing
        # the loop destroys no pending task ("Task was destroyed but it is pending!")
        pending = asyncio.all_tasks(self._loop)
        for task in pending:
            task.cancel()
        self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self._loop.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.refuse:
            _abort(writer)
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            _abort(writer)
            return
        self._writers.update((writer, up_writer))
        budget = [self.cut_after]
        await asyncio.gather(
            self._pipe(reader, up_writer, budget, (writer, up_writer)),
            self._pipe(up_reader, writer, budget, (writer, up_writer), replies=True),
            return_exceptions=True,
        )
        self._writers.difference_update((writer, up_writer))

    async def _pipe(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        budget: list[int | None],
        pair: tuple[asyncio.StreamWriter, asyncio.StreamWriter],
        *,
        replies: bool = False,
    ) -> None:
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                if replies and self.lost_replies:
                    if self.passed_replies:
                        self.passed_replies -= 1
                    else:
                        self.lost_replies -= 1
                        for w in pair:
                            _abort(w)
                        return
                while self.blackhole:
                    await asyncio.sleep(0.01)
                if self.latency:
                    await asyncio.sleep(self.latency)
                if budget[0] is not None:
                    if len(data) >= budget[0]:
                        writer.write(data[: budget[0]])
                        for w in pair:
                            _abort(w)
                        return
                    budget[0] -= len(data)
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            for w in pair:
                if not w.is_closing():
                    w.close()

    def reset_all(self) -> None:
        """Reset every live connection (RST, not FIN)."""

        def reset() -> None:
            for w in list(self._writers):
                _abort(w)
            self._writers.clear()

        self._loop.call_soon_threadsafe(reset)

    def heal(self) -> None:
        self.latency = 0.0
        self.blackhole = False
        self.refuse = False
        self.cut_after = None
        self.lost_replies = self.passed_replies = 0

    @contextmanager
    def refusing(self) -> Iterator[None]:
        self.refuse = True
        self.reset_all()
        try:
            yield
        finally:
            self.refuse = False

    def close(self) -> None:
        def stop() -> None:
            self._server.close()
            for w in list(self._writers):
                _abort(w)
            self._loop.stop()

        self._loop.call_soon_threadsafe(stop)
        self._thread.join(5)


def _abort(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()
