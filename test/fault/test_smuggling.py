"""Request smuggling and malformed requests. Each vector goes on its own connection, all at
once, and everything the server sends is read until it closes (header_timeout_ms=1000, so a
server still waiting for bytes answers 408 within a second).

- Ambiguous or malformed vectors must get one 4xx/5xx (400 mostly) or a bare close: never a 2xx,
  and never a second response where the bytes after the first request would have been taken
  as a smuggled one (each carries "GET /id" after its body).
- Well-formed controls (optional whitespace, case, chunk extensions) must be framed exactly as
  written: the POST /echo answers its body, then the pipelined GET /id is answered; a request
  inside a Content-Length body is never answered.

The table (vector -> statuses, end of connection, error message) is printed to stderr."""
import json
import sys
import time
import unittest

import faultutil as fu
from faultutil import Server

SMUGGLED = b"GET /id HTTP/1.1\r\nHost: t\r\n\r\n"
CHUNKED_HELLO = b"5\r\nhello\r\n0\r\n\r\n"


def post(headers, body):
    return b"POST /echo HTTP/1.1\r\nHost: t\r\n" + headers + b"\r\n" + body


def te(value, body=CHUNKED_HELLO, extra=b""):
    return post(b"Transfer-Encoding: " + value + b"\r\n" + extra, body + SMUGGLED)


def cl(value, body=b"hello"):
    return post(b"Content-Length: " + value + b"\r\n", body + SMUGGLED)


def line(request_line, headers=b"Host: t\r\n"):
    return request_line + b"\r\n" + headers + b"\r\n"


REJECT = [
    # Content-Length and Transfer-Encoding together, TE spellings
    ("CL + TE: chunked", post(b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
                              b"0\r\n\r\n" + SMUGGLED)),
    ("TE: chunked + CL", post(b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n",
                              b"0\r\n\r\n" + SMUGGLED)),
    ("TE: xchunked + CL", post(b"Transfer-Encoding: xchunked\r\nContent-Length: 5\r\n",
                               b"0\r\n\r\n" + SMUGGLED)),
    ("TE: ' chunked' + CL", post(b"Transfer-Encoding:  chunked\r\nContent-Length: 5\r\n",
                                 b"0\r\n\r\n" + SMUGGLED)),
    ("TE: xchunked", te(b"xchunked")),
    ("TE: chunked, identity", te(b"chunked, identity")),
    ("TE: identity, chunked", te(b"identity, chunked")),
    ("TE: gzip, chunked", te(b"gzip, chunked")),
    ("TE: identity", te(b"identity", b"hello")),
    ("TE: chunked twice", te(b"chunked", extra=b"Transfer-Encoding: chunked\r\n")),
    ("TE: identity; TE: chunked", post(b"Transfer-Encoding: identity\r\nTransfer-Encoding: "
                                       b"chunked\r\n", CHUNKED_HELLO + SMUGGLED)),
    ("TE: chunked; TE: identity", post(b"Transfer-Encoding: chunked\r\nTransfer-Encoding: "
                                       b"identity\r\n", CHUNKED_HELLO + SMUGGLED)),
    ("TE: chunked + CL twice", post(b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n"
                                    b"Content-Length: 5\r\n", CHUNKED_HELLO + SMUGGLED)),
    # Content-Length spellings
    ("CL twice, equal", post(b"Content-Length: 5\r\nContent-Length: 5\r\n", b"hello" + SMUGGLED)),
    ("CL twice, unequal", post(b"Content-Length: 5\r\nContent-Length: 0\r\n",
                               b"hello" + SMUGGLED)),
    ("CL: 5, 5", cl(b"5, 5")),
    ("CL: +5", cl(b"+5")),
    ("CL: -5", cl(b"-5")),
    ("CL: 0x5", cl(b"0x5")),
    ("CL: 5 5", cl(b"5 5")),
    ("CL: 2^64+5 (overflow)", cl(b"18446744073709551621")),
    ("CL: 5<NUL>", cl(b"5\x00")),
    ("CL: empty", cl(b"")),
    # chunk-size tricks
    ("chunk size overflowing hex", te(b"chunked", b"fffffffffffffffff5\r\nhello\r\n0\r\n\r\n")),
    ("chunk size '5 ;ext' (space)", te(b"chunked", b"5 ;ext\r\nhello\r\n0\r\n\r\n")),
    ("chunk size -5", te(b"chunked", b"-5\r\nhello\r\n0\r\n\r\n")),
    ("chunk size 0x5", te(b"chunked", b"0x5\r\nhello\r\n0\r\n\r\n")),
    ("chunk data without CRLF", te(b"chunked", b"5\r\nhello0\r\n\r\n")),
    ("chunk lines with bare LF", te(b"chunked", b"5\nhello\n0\n\n")),
    ("chunk size line with bare CR", te(b"chunked", b"5\rhello\r\n0\r\n\r\n")),
    ("chunk size huge (7fff...)", te(b"chunked", b"7fffffffffffffff\r\nhello\r\n0\r\n\r\n")),
    ("chunk size over max_body_bytes", te(b"chunked", b"200000\r\nhello\r\n0\r\n\r\n")),
    # line endings, folding
    ("bare CR line ends", b"GET /id HTTP/1.1\rHost: t\r\r"),
    ("bare LF line ends", b"GET /id HTTP/1.1\nHost: t\n\n"),
    ("bare LF after a header", b"GET /id HTTP/1.1\r\nHost: t\nX-A: b\r\n\r\n"),
    ("bare CR in a header line", b"GET /id HTTP/1.1\r\nHost: t\rX-A: b\r\n\r\n"),
    ("obs-fold", b"GET /id HTTP/1.1\r\nHost: t\r\nX-A: a\r\n b\r\n\r\n"),
    ("obs-fold hiding TE", post(b"X-A: a\r\n\tTransfer-Encoding: chunked\r\nContent-Length: 5\r\n",
                                b"0\r\n\r\n" + SMUGGLED)),
    ("obs-fold continuing CL", post(b"Content-Length:\r\n 5\r\n", b"hello" + SMUGGLED)),
    # NUL and control bytes
    ("NUL in request target", line(b"GET /id\x00 HTTP/1.1")),
    ("NUL in method", line(b"G\x00ET /id HTTP/1.1")),
    ("control byte in target", line(b"GET /i\x01d HTTP/1.1")),
    ("DEL in target", line(b"GET /i\x7fd HTTP/1.1")),
    ("NUL in header name", line(b"GET /id HTTP/1.1", b"Ho\x00st: t\r\n")),
    ("control byte in header name", line(b"GET /id HTTP/1.1", b"X-\x01A: t\r\n")),
    ("NUL in header value", line(b"GET /id HTTP/1.1", b"X-A: a\x00b\r\n")),
    ("control byte in header value", line(b"GET /id HTTP/1.1", b"X-A: a\x01b\r\n")),
    ("DEL in header value", line(b"GET /id HTTP/1.1", b"X-A: a\x7fb\r\n")),
    # header syntax
    ("SP before colon", line(b"GET /id HTTP/1.1", b"Host : t\r\n")),
    ("HTAB before colon", line(b"GET /id HTTP/1.1", b"Host\t: t\r\n")),
    ("SP before colon in CL", post(b"Content-Length : 5\r\n", b"hello" + SMUGGLED)),
    ("empty header name", line(b"GET /id HTTP/1.1", b": t\r\n")),
    ("SP before the first header", line(b"GET /id HTTP/1.1", b" Host: t\r\n")),
    # versions, methods, HTTP/2, HTTP/0.9
    ("HTTP/2 preface", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"),
    ("HTTP/0.9 'GET /'", b"GET /\r\n"),
    ("HTTP/0.9 'GET /id' + blank line", b"GET /id\r\n\r\n"),
    ("HTTP/0.9 version", line(b"GET /id HTTP/0.9")),
    ("HTTP/1.2", line(b"GET /id HTTP/1.2")),
    ("HTTP/9.9", line(b"GET /id HTTP/9.9")),
    ("HTTP/2.0 request line", line(b"GET /id HTTP/2.0")),
    ("HTTP/1.10", line(b"GET /id HTTP/1.10")),
    ("lowercase http/1.1", line(b"GET /id http/1.1")),
    ("method of 10,000 bytes", line(b"A" * 10000 + b" /id HTTP/1.1")),
    ("unknown method GETX", line(b"GETX /id HTTP/1.1")),
]

# Well-formed: exactly these statuses, the first body as given (None = not checked).
CONTROLS = [
    ("TE: chunked", te(b"chunked"), [200, 200], b"hello"),
    ("TE: CHUNKED (case)", te(b"CHUNKED"), [200, 200], b"hello"),
    ("TE: <HTAB>chunked (OWS)", post(b"Transfer-Encoding:\tchunked\r\n",
                                     CHUNKED_HELLO + SMUGGLED), [200, 200], b"hello"),
    ("TE: ' chunked ' (OWS)", te(b" chunked "), [200, 200], b"hello"),
    ("CL: ' 5' (OWS)", cl(b" 5"), [200, 200], b"hello"),
    ("CL: '5 ' (OWS)", cl(b"5 "), [200, 200], b"hello"),
    ("chunk extension 5;ext", te(b"chunked", b"5;ext\r\nhello\r\n0\r\n\r\n"), [200, 200],
     b"hello"),
    ("chunk extension 5;a=\"b\"", te(b"chunked", b"5;a=\"b\"\r\nhello\r\n0\r\n\r\n"), [200, 200],
     b"hello"),
    ("chunked with trailer", te(b"chunked", b"5\r\nhello\r\n0\r\nX-T: 1\r\n\r\n"), [200, 200],
     b"hello"),
    ("GET with a CL body holding a request", b"GET /id HTTP/1.1\r\nHost: t\r\nContent-Length: "
     b"%d\r\n\r\n%s" % (len(SMUGGLED), SMUGGLED), [200], None),
]


def error_of(body):
    try:
        return json.loads(body).get("error", "")
    except ValueError:
        return body[:60].decode("latin-1")


class Smuggling(unittest.TestCase):
    maxDiff = None

    @classmethod
    def setUpClass(cls):
        if not fu.sfharness.BINARY:
            raise unittest.SkipTest("SNOWFLAKED_BIN is not set")
        cls.srv = Server("--set", "server.header_timeout_ms=1000")
        cls.table = []

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()
        if cls.table:
            width = max(len(r[0]) for r in cls.table)
            out = ["", "smuggling / malformed request table (vector -> statuses, connection end, "
                   "error message):"]
            for name, statuses, how, msg in cls.table:
                out.append("  %-*s  %-9s %-6s %s" % (width, name, statuses or "-", how, msg))
            sys.stderr.write("\n".join(out) + "\n")

    def test_malformed_and_ambiguous_requests_are_refused(self):
        t0 = time.monotonic()
        results = fu.exchange_all(self.srv.port, dict(REJECT), timeout=5)
        took = time.monotonic() - t0
        problems = []
        for name, _ in REJECT:
            data, how = results[name]
            got, rest = fu.parse_responses(data)
            statuses = [g[0] for g in got]
            msg = error_of(got[0][2]) if got else ("(%d stray bytes)" % len(rest) if rest else "")
            self.table.append((name, ",".join(map(str, statuses)), how, msg))
            if any(200 <= s < 300 for s in statuses):
                problems.append("%s: 2xx %s" % (name, statuses))
            if len(statuses) > 1:
                problems.append("%s: %d responses (smuggled request answered)" % (name,
                                                                                  len(statuses)))
            if statuses and not all(400 <= s < 600 for s in statuses):
                problems.append("%s: status %s" % (name, statuses))
            if rest:
                problems.append("%s: %d bytes that are not a response" % (name, len(rest)))
            if how == "open":
                problems.append("%s: connection still open after %.0f s" % (name, took))
            if got and got[0][1].get("connection") != "close":
                problems.append("%s: error without Connection: close" % name)
        fu.figure("smuggling: %d malformed vectors" % len(REJECT), "answered in %.2f s" % took)
        self.assertEqual(problems, [])

    def test_well_formed_framing_is_exact(self):
        results = fu.exchange_all(self.srv.port, {n: raw for n, raw, _, _ in CONTROLS},
                                  timeout=1.5)
        problems = []
        for name, _, want, body in CONTROLS:
            data, how = results[name]
            got, rest = fu.parse_responses(data)
            statuses = [g[0] for g in got]
            self.table.append(("control: " + name, ",".join(map(str, statuses)), how,
                               "body %r" % got[0][2][:20] if got else ""))
            if statuses != want or rest:
                problems.append("%s: %s + %d stray bytes, want %s" % (name, statuses, len(rest),
                                                                      want))
            elif body is not None and got[0][2] != body:
                problems.append("%s: echoed %r" % (name, got[0][2]))
        self.assertEqual(problems, [])

    def test_fixed_vectors_have_their_status(self):
        """Regression tests for service/src/http/http.c: the empty field name (400), a request
        line with HTTP/2.0 (505), transfer codings other than chunked (501); the TE check holds
        when the name or value arrives in pieces."""
        exact = {
            "empty header name": line(b"GET /id HTTP/1.1", b"Accept: expect\r\n: foo\r\n"),
            "HTTP/2.0 request line": line(b"GET /id HTTP/2.0"),
            "TE: identity, chunked": te(b"identity, chunked"),
            "TE: gzip, chunked": te(b"gzip, chunked"),
            "TE: identity; TE: chunked": post(b"Transfer-Encoding: identity\r\n"
                                              b"Transfer-Encoding: chunked\r\n",
                                              CHUNKED_HELLO + SMUGGLED),
            "TE: chunk": te(b"chunk", b"hello"),
        }
        want = {"empty header name": 400, "HTTP/2.0 request line": 505}
        results = fu.exchange_all(self.srv.port, exact, timeout=3)
        for name in exact:
            got, rest = fu.parse_responses(results[name][0])
            self.assertEqual(([g[0] for g in got], rest), ([want.get(name, 501)], b""), name)
        # Split across reads: "Transfer-Enc" | "oding: gzip, chu" | "nked".
        for pieces, status in (([b"Transfer-Enc", b"oding: gzip, chu", b"nked\r\n\r\n"], 501),
                               ([b"Transfer-Enc", b"oding: chu", b"nked\r\n\r\n"], 200),
                               ([b"Transfer-Encoding: chunked", b" \r\n\r\n"], 200),
                               ([b"Transfer-Encoding: chunked", b"x\r\n\r\n"], None)):
            with self.subTest(pieces), self.srv.connect() as s:
                s.sendall(b"POST /echo HTTP/1.1\r\nHost: t\r\n")
                for p in pieces:
                    time.sleep(0.05)
                    s.sendall(p)
                try:
                    s.sendall(CHUNKED_HELLO)
                except OSError:
                    pass
                r = fu.Reader(s).response()
                if status is None:
                    self.assertGreaterEqual(r.status, 400)
                else:
                    self.assertEqual(r.status, status)
                if status == 200:
                    self.assertEqual(r.body, b"hello")
        self.assertEqual(fu.request(self.srv, fu.get("/id")).status, 200)


if __name__ == "__main__":
    unittest.main()
