"""Load client of the service benchmark: concurrent keep-alive HTTP/1.1 searches, run as its own process.

``service.py`` runs this as a subprocess so that the clients' CPU (request building, response parsing, JSON checks)
neither shares the service's GIL nor the measuring script's event loop::

    python benchmarks/httpclient.py PORT CLIENTS < calls.json     # calls: [[query, index], ...]

Each of ``CLIENTS`` clients holds one keep-alive connection (raw socket, no HTTP library) and sends its share of the
calls one after another (``calls[c::CLIENTS]``), each ``POST /procedure_search`` with ``limit`` 5. Every answer is
checked (HTTP 200, ``status: ok``, results, vector search available). Prints ``{"seconds": ...}``: the time from all
connections open to the last answer.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time


async def connect(port: int):
    return await asyncio.open_connection("127.0.0.1", port)


async def post(reader, writer, port: int, body: bytes) -> bytes:
    """One keep-alive ``POST /procedure_search``; the response body (Content-Length framing, as uvicorn answers)."""
    writer.write(
        b"POST /procedure_search HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (port, len(body), body)
    )
    head = await reader.readuntil(b"\r\n\r\n")
    status_line, _, headers = head.decode("latin-1").partition("\r\n")
    length = None
    for line in headers.split("\r\n"):
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    if length is None:
        raise RuntimeError(f"no Content-Length in the answer: {head[:300]!r}")
    data = await reader.readexactly(length)
    if status_line.split(" ", 2)[1] != "200":
        raise RuntimeError(f"HTTP error: {status_line}: {data[:300]!r}")
    return data


def check(data: bytes) -> None:
    answer = json.loads(json.loads(data)["answer"])
    if answer.get("status") != "ok" or not answer["results"] or "vector_search" in answer:
        raise RuntimeError(f"unexpected answer: {str(answer)[:500]}")


async def run(port: int, clients: int, calls: list) -> float:
    connections = [await connect(port) for _ in range(clients)]
    bodies = [json.dumps({"query": q, "index": index, "limit": 5}).encode() for q, index in calls]

    async def client(number: int) -> None:
        reader, writer = connections[number]
        for body in bodies[number::clients]:
            check(await post(reader, writer, port, body))

    started = time.perf_counter()
    await asyncio.gather(*(client(c) for c in range(clients)))
    seconds = time.perf_counter() - started
    for _, writer in connections:
        writer.close()
    return seconds


def main() -> int:
    port, clients = int(sys.argv[1]), int(sys.argv[2])
    calls = json.load(sys.stdin)
    print(json.dumps({"seconds": asyncio.run(run(port, clients, calls))}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
