#!/usr/bin/python3
"""upstream.py — the soak's upstream: tests/integration/upstream_app.py, counting what it
serves instead of keeping it.

    upstream.py --ports N --stats FILE

It serves as upstream_app.py does (N loopback ports and a control port, picked by the
kernel, announced on stdout as "ports P1 ... PN control C"; a JSON echo on any path,
_big, _slow, _upgrade and the rest of its behaviours). upstream_app rather than a second
lfhttpd: one process answers every proxied load, the WebSocket echo included (lfhttpd has
no handler that answers 101), and it knows each request's connection and its number on
that connection, which is how the soak sees whether the proxy reuses its connections.

upstream_app keeps every request and every byte it received, for tests to look at; over a
soak that would grow without bound. So once a second this script counts the requests
since the last time (per kind, from the User-Agent "soak-KIND" the proxy passes on) and
forgets them with the closed connections, in the same event loop (nothing is missed or
counted twice), and writes FILE (JSON, replaced whole):

  {"connections": opened since the start, "open": open now,
   "kinds": {KIND: {"requests": N, "first": requests that were the first on their
                    connection, i.e. that found no kept connection}}}

It stops on SIGTERM, writing FILE one last time.
"""
import asyncio
import collections
import json
import os
import signal
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                "integration"))
import upstream_app as app  # noqa: E402

counts = {"connections": 0, "open": 0,
          "kinds": collections.defaultdict(lambda: {"requests": 0, "first": 0})}


class CountingConn(app.Conn):
    """A connection of upstream_app's, counted as it opens."""

    def __init__(self, *args):
        super().__init__(*args)
        counts["connections"] += 1


app.Conn = CountingConn


def kind_of(request):
    ua = app.header(request["headers"], "user-agent") or ""
    return ua[len("soak-"):] if ua.startswith("soak-") else "(other)"


def count_and_forget(path):
    for r in app.requests:
        k = counts["kinds"][kind_of(r)]
        k["requests"] += 1
        k["first"] += r["seq"] == 1
    app.requests.clear()
    app.conns[:] = [c for c in app.conns if c["open"]]
    for c in app.conns:
        c["raw_in"] = ""
    counts["open"] = len(app.conns)
    with open(path + ".tmp", "w") as f:
        json.dump(counts, f)
    os.replace(path + ".tmp", path)


async def main(path):
    stopped = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopped.set)
    serving = asyncio.create_task(app.main())
    while not stopped.is_set():
        try:
            await asyncio.wait_for(stopped.wait(), timeout=1.0)
        except asyncio.TimeoutError:
            pass
        if serving.done():
            serving.result()   # its failure, raised here
        count_and_forget(path)
    serving.cancel()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[sys.argv.index("--stats") + 1]))
