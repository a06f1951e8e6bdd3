"""SIGTERM during mixed load: ID requests and cache writes over HTTP and memcached sets, all
pipelined and in flight when the signal comes.

- Every request the server took gets a complete answer: each client connection counts what it
  sent and what came back; a connection may end with its last batch unanswered (requests the
  server never read: it was closing the connection as idle, or had answered the one before with
  Connection: close), never inside a response. With log.access_log on, the requests the server
  answered (one ACCESS line each, by connection and sequence number in the URL) are compared
  with the responses each connection received: the sets must be equal.
- The exit status is 0.
- The snapshot written at stop holds every acknowledged write: a restart on the same data_dir
  reads each one back with its value."""
import itertools
import os
import re
import signal
import socket
import tempfile
import threading
import time
import unittest

import faultutil as fu
from faultutil import Reader, Server, free_port

LOAD_S = 1.5    # load before the signal
HTTP_DEPTH = 4  # pipelined requests per HTTP batch
MC_DEPTH = 8    # pipelined sets per memcached batch


class ConnStats:
    def __init__(self, cid, kind):
        self.cid, self.kind = cid, kind
        self.sent = self.answered = 0
        self.answered_ids = set()  # sequence numbers answered on this connection
        self.close_marked = False  # a response carried Connection: close
        self.end = None            # how the connection ended
        self.leftover = b""        # bytes of an incomplete response when it ended
        self.bad = []              # unexpected statuses / replies


class Client(threading.Thread):
    """One load client: connects, sends batches of pipelined requests, reads every answer, and
    reconnects when the server closes, until the listener refuses (draining) or told to stop."""
    conn_ids = itertools.count(1)
    lock = threading.Lock()

    def __init__(self, port, kind, idx):
        super().__init__(daemon=True)
        self.port, self.kind, self.idx = port, kind, idx
        self.conns = []
        self.acked = {}  # key -> value acknowledged (cache writes)
        self.stop = False
        self.refused = False
        self.error = None
        self.seq = 0

    def run(self):
        try:
            while not self.stop:
                try:
                    s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
                except OSError:
                    self.refused = True  # listeners closed: the server is draining
                    return
                with Client.lock:
                    cid = next(Client.conn_ids)
                st = ConnStats(cid, self.kind)
                self.conns.append(st)
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                s.settimeout(10)
                try:
                    if self.kind == "mc":
                        self.mc_conn(s, st)
                    else:
                        self.http_conn(s, st)
                finally:
                    s.close()
        except Exception as e:  # surfaced by the test
            self.error = repr(e)

    def batch(self, st, depth):
        items = []
        for _ in range(depth):
            self.seq += 1
            n = self.seq
            if self.kind == "id":
                items.append((n, None, None, b"GET /id?c=%d&n=%d HTTP/1.1\r\nHost: t\r\n\r\n" %
                              (st.cid, n)))
            elif self.kind == "put":
                key = b"h%d-%d" % (self.idx, n)
                value = b"http-value-%d-%d-" % (self.idx, n) * (1 + n % 7)
                items.append((n, key, value,
                              b"PUT /cache/%s?c=%d&n=%d HTTP/1.1\r\nHost: t\r\nContent-Length: "
                              b"%d\r\n\r\n%s" % (key, st.cid, n, len(value), value)))
            else:
                key = b"m%d-%d" % (self.idx, n)
                value = b"mc-value-%d-%d-" % (self.idx, n) * (1 + n % 5)
                items.append((n, key, value, b"set %s %d 0 %d\r\n%s\r\n" %
                              (key, n % 1000, len(value), value)))
        return items

    def send(self, s, st, items):
        try:
            s.sendall(b"".join(it[3] for it in items))
        except OSError as e:  # closed under us: nothing of this batch was taken
            st.end = "send: %s" % e.__class__.__name__
            return False
        st.sent += len(items)
        return True

    def http_conn(self, s, st):
        rd = Reader(s)
        while not self.stop:
            items = self.batch(st, HTTP_DEPTH)
            if not self.send(s, st, items):
                return
            for n, key, value, _ in items:
                try:
                    r = rd.response()
                except (EOFError, ConnectionResetError) as e:
                    st.end = e.__class__.__name__
                    st.leftover = rd.buf
                    return
                want = (200,) if self.kind == "id" else (201, 204)
                if r.status not in want or int(r.header("content-length")) != len(r.body):
                    st.bad.append((n, r.status))
                st.answered += 1
                st.answered_ids.add(n)
                if key is not None and r.status in want:
                    self.acked[key] = value
                if r.header("connection") == "close":
                    st.close_marked = True
            if st.close_marked:  # nothing may follow: the server closes
                st.end = "close-marked" if rd.closed(timeout=5) else "not closed after close"
                st.leftover = rd.buf
                return

    def mc_conn(self, s, st):
        buf = b""
        while not self.stop:
            items = self.batch(st, MC_DEPTH)
            if not self.send(s, st, items):
                return
            for n, key, value, _ in items:
                while b"\r\n" not in buf:
                    try:
                        d = s.recv(65536)
                    except ConnectionResetError:
                        d = b""
                    if not d:
                        st.end = "eof"
                        st.leftover = buf
                        return
                    buf += d
                line, buf = buf.split(b"\r\n", 1)
                if line != b"STORED":
                    st.bad.append((n, line))
                else:
                    self.acked[key] = value
                st.answered += 1
                st.answered_ids.add(n)


def mc_gets(port, keys):
    """{key: value} over the memcached protocol, 100 keys per command."""
    found = {}
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        buf = b""
        for i in range(0, len(keys), 100):
            s.sendall(b"get " + b" ".join(keys[i:i + 100]) + b"\r\n")
            while True:
                while b"\r\n" not in buf:
                    d = s.recv(1 << 16)
                    if not d:
                        raise AssertionError("memcached connection closed")
                    buf += d
                line, buf = buf.split(b"\r\n", 1)
                if line == b"END":
                    break
                _, key, _flags, size = line.split()
                size = int(size)
                while len(buf) < size + 2:
                    d = s.recv(1 << 16)
                    if not d:
                        raise AssertionError("memcached connection closed")
                    buf += d
                found[key], buf = buf[:size], buf[size + 2:]
    return found


class SigtermDrain(unittest.TestCase):
    def setUp(self):
        fu.need_binary(self)
        self.tmp = tempfile.TemporaryDirectory(prefix="sf_fault_drain_")
        self.data = os.path.join(self.tmp.name, "data")
        self.servers, self.clients = [], []

    def tearDown(self):
        for c in self.clients:
            c.stop = True
        for c in self.clients:
            c.join(timeout=10)
        for s in self.servers:
            fu.discard(s)
        self.tmp.cleanup()

    def start(self, *args):
        self.mc_port = free_port()
        srv = Server("--set", "cache.memcached_port=%d" % self.mc_port, *args,
                     data_dir=self.data)
        self.servers.append(srv)
        return srv

    def test_sigterm_under_mixed_load_answers_everything_taken_and_persists_acked_writes(self):
        srv = self.start("--set", "log.access_log=true", "--set", "server.shutdown_grace_ms=5000")
        kinds = ["id", "id", "id", "put", "put", "mc", "mc"]
        self.clients = [Client(self.mc_port if k == "mc" else srv.port, k, i)
                        for i, k in enumerate(kinds)]
        for c in self.clients:
            c.start()
        time.sleep(LOAD_S)
        t_sig = time.monotonic()
        srv.signal(signal.SIGTERM)
        rc = srv.wait(timeout=20)
        drained_in = time.monotonic() - t_sig
        for c in self.clients:
            c.join(timeout=15)
        self.assertTrue(all(not c.is_alive() for c in self.clients), "a client hung")
        self.assertEqual([c.error for c in self.clients if c.error], [])
        out = srv.output()
        self.assertEqual(rc, 0, out[-3000:])
        self.assertIn("SIGTERM received, draining", out)

        # Per connection: complete responses only; anything unanswered is the last batch.
        totals = {}
        for c in self.clients:
            for st in c.conns:
                self.assertEqual(st.bad, [], "unexpected answers on connection %d" % st.cid)
                self.assertEqual(st.leftover, b"", "connection %d (%s) ended inside a response"
                                 " after %d answers: %r" % (st.cid, st.kind, st.answered,
                                                           st.leftover[:200]))
                self.assertNotEqual(st.end, "not closed after close")
                unanswered = st.sent - st.answered
                depth = MC_DEPTH if st.kind == "mc" else HTTP_DEPTH
                self.assertTrue(0 <= unanswered <= depth,
                                "connection %d: %d sent, %d answered" % (st.cid, st.sent,
                                                                         st.answered))
                t = totals.setdefault(st.kind, [0, 0, 0, 0, 0])
                t[0] += 1
                t[1] += st.sent
                t[2] += st.answered
                t[3] += unanswered
                t[4] += st.close_marked
        for kind, (conns, sent, answered, unanswered, marked) in sorted(totals.items()):
            fu.figure("drain: %s" % kind, "%d connections, %d requests sent, %d answered, %d "
                      "unanswered at close (never read by the server), %d ended with "
                      "Connection: close" % (conns, sent, answered, unanswered, marked))
        self.assertGreater(totals["id"][2], 100)
        self.assertGreater(totals["put"][2], 100)
        self.assertGreater(totals["mc"][2], 100)

        # Server side: what it answered (access log) is exactly what each connection received.
        if "log: dropped" in out:
            fu.figure("drain: access-log comparison", "skipped: the logger dropped lines")
        else:
            served = {}
            for m in re.finditer(r"ACCESS (?:GET /id|PUT /cache/\S+)\?c=(\d+)&n=(\d+) (\d{3}) ",
                                 out):
                served.setdefault(int(m.group(1)), set()).add(int(m.group(2)))
            n_http = 0
            for c in self.clients:
                for st in c.conns:
                    if st.kind == "mc":
                        continue
                    n_http += len(st.answered_ids)
                    self.assertEqual(served.get(st.cid, set()), st.answered_ids,
                                     "connection %d: answered by the server but not received:"
                                     " %s" % (st.cid, sorted(served.get(st.cid, set()) -
                                                              st.answered_ids)[:10]))
            self.assertEqual(sum(len(v) for v in served.values()), n_http)
            fu.figure("drain: access log vs client", "%d HTTP responses logged = received" %
                      n_http)
        fu.figure("drain: SIGTERM to exit", "%.0f ms" % (drained_in * 1e3))
        m = re.search(r"cache: final snapshot: (\d+) items", out)
        self.assertIsNotNone(m, "no final snapshot in the log")

        # The final snapshot holds every acknowledged write.
        acked = {}
        for c in self.clients:
            acked.update(c.acked)
        fu.discard(self.servers.pop())
        srv = self.start()
        got = mc_gets(self.mc_port, sorted(acked))
        missing = [k for k in acked if got.get(k) != acked[k]]
        self.assertEqual(missing[:10], [], "%d of %d acknowledged writes lost or changed" %
                         (len(missing), len(acked)))
        fu.figure("drain: acknowledged writes read back after restart", "%d of %d (snapshot had "
                  "%s items)" % (len(acked) - len(missing), len(acked), m.group(1)))
        self.assertEqual(fu.stop_expect(self.servers.pop())[0], 0)


if __name__ == "__main__":
    unittest.main()
