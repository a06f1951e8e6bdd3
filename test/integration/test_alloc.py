"""No allocation per request in steady state: with an LD_PRELOAD shim counting every malloc,
calloc, realloc and aligned allocation of the process, 100,000 requests after a warm-up must not
allocate (a small allowance covers libc internals that are not per request)."""
import os
import re
import unittest

from sfharness import Reader, Server, get

SHIM = os.environ.get("SF_MALLOC_SHIM", "")
CONNS = 8
ALLOWANCE = 16


def mallocs(sock, reader):
    sock.sendall(get("/metrics"))
    text = reader.response().body.decode()
    return int(re.search(r"^snowflaked_process_malloc_calls_total (\d+)$", text, re.M).group(1))


class SteadyStateAllocations(unittest.TestCase):
    def test_100k_requests_do_not_allocate(self):
        if not SHIM:
            self.skipTest("SF_MALLOC_SHIM not set")
        srv = Server("--set", "server.max_requests_per_connection=1000000",
                     env={"LD_PRELOAD": SHIM}, threads=2)
        try:
            conns = [srv.connect() for _ in range(CONNS)]
            readers = [Reader(s) for s in conns]
            mix = [get("/id"), get("/ids?count=16"), get("/healthz"), get("/nope"),
                   get("/id?format=text&encoding=base62"), get("/id/914999261932814336")]

            def run(total):
                batch = b"".join(mix) * 20  # 120 pipelined requests per write
                per = len(mix) * 20
                done = 0
                while done < total:
                    for s, rd in zip(conns, readers):
                        s.sendall(batch)
                        for _ in range(per):
                            r = rd.response()
                            self.assertIn(r.status, (200, 404))
                        done += per
                return done

            run(20000)  # warm-up: pools reach their working size
            before = mallocs(conns[0], readers[0])
            n = run(100000)
            after = mallocs(conns[0], readers[0])
            for s in conns:
                s.close()
            print("\n%d requests: %d allocation calls (%.4f per request)" %
                  (n, after - before, (after - before) / n))
            self.assertLessEqual(after - before, ALLOWANCE)
        finally:
            srv.stop()


if __name__ == "__main__":
    unittest.main()
