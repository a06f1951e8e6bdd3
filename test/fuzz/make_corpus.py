#!/usr/bin/env python3
"""Writes the text seeds of test/fuzz/corpus/ (HTTP, memcached, config, IDs, TLS records).

Usage: test/fuzz/make_corpus.py [CORPUS_DIR]   (default: test/fuzz/corpus next to this file)

The snapshot seeds are binary and come from the real code: build-fuzz/fuzz_make_seeds DIR
(test/fuzz/run.sh --seeds runs both). Seeds are small on purpose: each shows the harness one
feature; libFuzzer combines them. Files are named after what they exercise, so a crash found
later can be told apart from a seed. Existing files of the same name are overwritten, others
(regression seeds added by hand: crash-*, regress-*) are left alone.

HTTP and memcached seeds start with the harness's flag byte (see fuzz_http.c / fuzz_memcache.c):
bits 0-2 choose how the input is cut into reads (0 whole, 1 byte by byte, 2 up to 4 bytes,
3 up to 16, 4 up to 64, 5 up to 512, 6 up to 4096, 7 two random halves).
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

WHOLE, BYTES, UPTO4, UPTO16, UPTO64, UPTO512, UPTO4K, HALVES = range(8)
SLOW = 0x08          # http/memcache: the peer reads 4 KiB per flush
AUTH_WRITES = 0x20   # http: a token guards writes
AUTH_ALL = 0x30      # http: a token guards everything
EOF_END = 0x40       # http/memcache: the peer sends FIN at the end
DRAINING = 0xC0      # http: the server is draining
TINY = 0x10          # memcache: 16 KiB store
MC_AUTH = 0x80       # memcache: memcached -Y with t/authfile (foo:bar, baaaz:quux)


B62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
B32 = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
SOME_ID = 915045730106736640  # issued by the default layout in late 2026


def enc(v, digits, n):
    out = ""
    for _ in range(n):
        out = digits[v % len(digits)] + out
        v //= len(digits)
    return out


def req(method, target, headers=(), body=b"", version="HTTP/1.1", host=True):
    lines = [f"{method} {target} {version}".encode()]
    if host:
        lines.append(b"Host: fuzz")
    for h in headers:
        lines.append(h.encode() if isinstance(h, str) else h)
    if body and not any(h.lower().startswith(("content-length", "transfer-encoding"))
                        for h in headers if isinstance(h, str)):
        lines.append(f"Content-Length: {len(body)}".encode())
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def http_seeds():
    s = {}
    s["id"] = (WHOLE, req("GET", "/id"))
    s["id_text_hex"] = (BYTES, req("GET", "/id?encoding=hex&format=text", ["Accept: text/plain"]))
    s["id_bad_encoding"] = (WHOLE, req("GET", "/id?encoding=octal") + req("GET", "/id?format=xml"))
    s["head_id_ids"] = (UPTO4, req("HEAD", "/id") + req("HEAD", "/ids?count=5"))
    s["ids_base62"] = (UPTO16, req("GET", "/ids?count=10&encoding=base62"))
    s["ids_max_slow_reader"] = (WHOLE | SLOW, req("GET", "/ids?count=4096&format=text") * 4)
    s["bounds"] = (UPTO16, req("GET", "/bounds?from=2026-01-01T00:00:00Z&to=2026-02-01T00:00:00Z")
                   + req("GET", "/bounds?from=2026-01-01T01%3A00%3A00%2B01%3A00&to=1769904000000"
                                "&type=uuid7&encoding=base32")
                   + req("GET", "/bounds?from=1767225600000&to=1767225600000&type=ulid")
                   + req("HEAD", "/bounds?from=1767225600000&to=1767225600001&encoding=hex"))
    s["bounds_bad"] = (UPTO64, req("GET", "/bounds?from=2026-01-01T01:00:00%2001:00&to=1")
                       + req("GET", "/bounds?from=%zz&to=2") + req("GET", "/bounds?to=1")
                       + req("GET", "/bounds?from=2&to=1&type=uuid4")
                       + req("GET", "/bounds?from=1&to=2&type=ulid&encoding=hex")
                       + req("GET", "/bounds?from=2019-01-01T00:00:00Z&to=99999999999999999"))
    s["typeid"] = (UPTO16, req("GET", "/typeid?prefix=user") + req("GET", "/typeid")
                   + req("GET", "/typeids?prefix=my__type&count=3&format=text")
                   + req("HEAD", "/typeids?count=2&prefix=a")
                   + req("GET", "/typeid/user_01h455vb4pex5vsknk084sn02q?prefix=user")
                   + req("GET", "/typeid/prefix_0123456789abcdefghjkmnpqrs")
                   + req("GET", "/bounds?from=1767225600000&to=1767225600001&type=typeid"
                                "&prefix=user"))
    s["typeid_bad"] = (UPTO64, req("GET", "/typeid?prefix=User") + req("GET", "/typeid?prefix=_a")
                       + req("GET", "/typeids?count=0&prefix=a_")
                       + req("GET", "/typeid/user_01h455vb4pex5vsknk084sn02q?prefix=team")
                       + req("GET", "/typeid/pr%C3%A9fix_00000000000000000000000000")
                       + req("GET", "/typeid/user_%zz") + req("GET", "/typeid/" + "%61" * 100)
                       + req("GET", "/typeid/prefix_8zzzzzzzzzzzzzzzzzzzzzzzzz")
                       + req("GET", "/bounds?from=1&to=2&type=uuid7&prefix=user"))
    s["typeids_max_slow_reader"] = (WHOLE | SLOW, req(
        "GET", "/typeids?count=4096&prefix=" + "a_" * 31 + "b") * 2)
    s["ids_bad_counts"] = (WHOLE, req("GET", "/ids?count=0") + req("GET", "/ids?count=99999")
                           + req("GET", "/ids?count=12a") + req("GET", "/ids"))
    s["id_parse_each_encoding"] = (UPTO64, req("GET", f"/id/{SOME_ID}")
                                   + req("GET", f"/id/{SOME_ID:016x}")
                                   + req("GET", "/id/" + enc(SOME_ID, B32, 13))
                                   + req("GET", "/id/" + enc(SOME_ID, B62, 11))
                                   + req("GET", "/id/" + enc(SOME_ID, B62, 11) + "?encoding=base62")
                                   + req("GET", f"/id/{SOME_ID:x}?encoding=hex")
                                   + req("GET", "/id/18446744073709551615")
                                   + req("GET", "/id/nope") + req("GET", "/id/"))
    s["admin"] = (UPTO16, req("GET", "/healthz") + req("GET", "/readyz") + req("GET", "/metrics"))
    s["cache_put_get_delete"] = (UPTO64, req("PUT", "/cache/user%3A1", ["Content-Type: application/json"],
                                             b'{"name":"ada"}')
                                 + req("GET", "/cache/user%3A1")
                                 + req("GET", "/cache/user%3A1", ['If-None-Match: "1"'])
                                 + req("DELETE", "/cache/user%3A1", ['If-Match: "999"'])
                                 + req("DELETE", "/cache/user%3A1")
                                 + req("GET", "/cache/user%3A1"))
    s["cache_conditional"] = (UPTO16, req("PUT", "/cache/k?ttl=60", ["If-None-Match: *"], b"v1")
                              + req("PUT", "/cache/k", ["If-None-Match: *"], b"v2")
                              + req("PUT", "/cache/k", ['If-Match: W/"1"'], b"v3")
                              + req("PUT", "/cache/k", ["If-Match: *"], b"v4")
                              + req("PUT", "/cache/k", ['If-Match: "x"'], b"v5")
                              + req("PUT", "/cache/k?ttl=999999999999", [], b"v6"))
    s["cache_counter"] = (UPTO4, req("PUT", "/cache/n", [], b"41") + req("POST", "/cache/n/incr")
                          + req("POST", "/cache/n/incr?by=18446744073709551615")
                          + req("POST", "/cache/n/decr?by=100") + req("GET", "/cache/n/incr")
                          + req("POST", "/cache/missing/incr") + req("PUT", "/cache/s", [], b"abc")
                          + req("POST", "/cache/s/decr"))
    s["cache_bad_keys"] = (WHOLE, req("GET", "/cache/") + req("GET", "/cache/a%20b")
                           + req("GET", "/cache/%zz") + req("GET", "/cache/" + "k" * 251)
                           + req("PATCH", "/cache/k"))
    s["echo"] = (UPTO16, req("POST", "/echo", ["Content-Type: text/plain"], b"hello")
                 + req("GET", "/echo?msg=hello%20world%21") + req("GET", "/echo?msg=%4")
                 + req("GET", "/echo") + req("POST", "/echo", ["Content-Type: " + "x" * 130], b"y"))
    s["chunked_echo"] = (BYTES, req("POST", "/echo", ["Transfer-Encoding: chunked"])
                         + b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nTrailer: x\r\n\r\n")
    s["chunked_cache_put"] = (UPTO4, req("PUT", "/cache/ck", ["Transfer-Encoding: chunked"])
                              + b"3\r\nabc\r\n0\r\n\r\n" + req("GET", "/cache/ck"))
    s["pipelined_mixed"] = (UPTO16, req("GET", "/id") + req("GET", "/healthz")
                            + req("POST", "/echo", [], b"abc") + req("GET", "/ids?count=2")
                            + req("GET", "/nope"))
    s["pipeline_over_max"] = (WHOLE, req("GET", "/healthz") * 40)
    s["pipeline_over_max_split"] = (HALVES, req("GET", "/id") * 70)
    # Request smuggling and framing attacks: all must end in 400 and a close.
    s["smuggle_cl_te"] = (WHOLE, b"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 6\r\n"
                          b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /id HTTP/1.1\r\n\r\n")
    s["smuggle_te_cl"] = (UPTO4, b"POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n"
                          b"Content-Length: 3\r\n\r\n1\r\nA\r\n0\r\n\r\n")
    s["smuggle_double_cl"] = (WHOLE, b"POST /echo HTTP/1.1\r\nContent-Length: 1\r\n"
                              b"Content-Length: 2\r\n\r\nab")
    s["smuggle_te_list"] = (WHOLE, b"POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked, identity\r\n\r\n"
                            b"0\r\n\r\n")
    s["smuggle_te_obfuscated"] = (WHOLE, b"POST /echo HTTP/1.1\r\nTransfer-Encoding : chunked\r\n\r\n"
                                  b"0\r\n\r\n" + b"POST /echo HTTP/1.1\r\nTransfer-Encoding: xchunked\r\n\r\n")
    s["smuggle_cl_sign"] = (WHOLE, b"POST /echo HTTP/1.1\r\nContent-Length: +5\r\n\r\nhello"
                            + b"POST /echo HTTP/1.1\r\nContent-Length: 0x5\r\n\r\nhello")
    s["smuggle_chunk_size_overflow"] = (UPTO16, b"POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                                        b"fffffffffffffffff1\r\nA\r\n0\r\n\r\n")
    s["smuggle_chunk_bare_lf"] = (WHOLE, b"POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                                  b"3\nabc\n0\n\n")
    s["obs_fold"] = (WHOLE, b"GET /id HTTP/1.1\r\nHost: a\r\nX-A: 1\r\n  continued\r\n\r\n")
    s["obs_fold_split"] = (BYTES, b"GET /id HTTP/1.1\r\nX-A: 1\r\n\tcontinued\r\n\r\n")
    s["bare_lf_request"] = (WHOLE, b"GET /id HTTP/1.1\nHost: a\n\n")
    s["bare_cr_header"] = (WHOLE, b"GET /id HTTP/1.1\r\nX: a\rb\r\n\r\n")
    s["nul_in_header"] = (WHOLE, b"GET /id HTTP/1.1\r\nX: a\x00b\r\n\r\n")
    s["space_before_colon"] = (WHOLE, b"GET /id HTTP/1.1\r\nHost : a\r\n\r\n")
    s["http10_keepalive"] = (UPTO4, req("GET", "/id", ["Connection: keep-alive"], version="HTTP/1.0")
                             + req("GET", "/healthz", version="HTTP/1.0") + req("GET", "/id"))
    s["connection_close"] = (WHOLE, req("GET", "/id", ["Connection: close"]) + req("GET", "/id"))
    s["http09"] = (WHOLE, b"GET /\r\n")
    s["http2_preface"] = (WHOLE, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
    s["upgrade_websocket"] = (WHOLE, req("GET", "/echo?msg=x", ["Connection: Upgrade", "Upgrade: websocket"])
                              + b"\x81\x85binary")
    s["expect_continue"] = (UPTO16, req("PUT", "/cache/e", ["Expect: 100-continue"], b"body")
                            + req("POST", "/echo", ["Expect: 100-continue"], b"x", version="HTTP/1.0")
                            + req("POST", "/echo", ["Expect: teapot"], b"x"))
    s["too_large_header"] = (UPTO4K, req("GET", "/id", ["X-Big: " + "a" * 9000]))
    s["too_many_headers"] = (UPTO512, req("GET", "/id", [f"X-{i}: {i}" for i in range(70)]))
    s["too_long_url"] = (UPTO4K, req("GET", "/id?" + "q" * 5000))
    s["too_large_body"] = (WHOLE, b"POST /echo HTTP/1.1\r\nContent-Length: 2000000\r\n\r\nabc")
    s["too_large_chunked_body"] = (WHOLE, b"POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                                   b"200000\r\n" + b"z" * 64)
    s["methods"] = (UPTO16, req("DELETE", "/id") + req("POST", "/healthz", [], b"x")
                    + req("OPTIONS", "*") + req("CONNECT", "example.com:443") + req("GET", "/id?a&b=&=c"))
    s["auth_writes"] = (UPTO16 | AUTH_WRITES, req("PUT", "/cache/a", [], b"1")
                        + req("PUT", "/cache/a", ["Authorization: Bearer wrong"], b"1")
                        + req("PUT", "/cache/a", ["Authorization: bearer   fuzz-token"], b"1")
                        + req("GET", "/cache/a"))
    s["auth_everything"] = (UPTO4 | AUTH_ALL, req("GET", "/id") + req("GET", "/metrics",
                            ["Authorization: Bearer fuzz-token"]) + req("GET", "/healthz")
                            + req("GET", "/echo?msg=a", ["Authorization: Bearer "]))
    # issue 21: refused at the end of the headers (401, 405, 404): no 100 Continue, the body
    # (itself a request) never read; with the tiny budget (SLOW | 0x10) bodies get 503
    s["refused_at_head"] = (UPTO16 | AUTH_WRITES,
                            req("PUT", "/cache/r", ["Expect: 100-continue"], req("DELETE", "/cache/a"))
                            + req("POST", "/id", [], b"x") + req("GET", "/cache/a"))
    s["refused_at_head_chunked"] = (UPTO4, b"POST /nothing HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                                    b"5\r\nhello\r\n0\r\n\r\n" + req("GET", "/id"))
    s["inflight_budget"] = (UPTO512 | SLOW | 0x10, req("PUT", "/cache/b", [], b"b" * 4096)
                            + req("PUT", "/cache/b", ["Expect: 100-continue"], b"b" * 4097))
    s["inflight_budget_chunked"] = (UPTO512 | SLOW | 0x10, b"POST /echo HTTP/1.1\r\nTransfer-Encoding: "
                                    b"chunked\r\n\r\n800\r\n" + b"c" * 0x800 + b"\r\n" + b"800\r\n"
                                    + b"c" * 0x800 + b"\r\n1\r\nc\r\n0\r\n\r\n")
    s["header_timeout_partial"] = (WHOLE, b"GET /id HTTP/1.1\r\nHost: a\r\nX-Partial: ")
    s["partial_body_eof"] = (UPTO4 | EOF_END, b"POST /echo HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc")
    s["draining"] = (UPTO16 | DRAINING, req("GET", "/id") + req("GET", "/readyz"))
    s["duplicate_known_headers"] = (WHOLE, req("PUT", "/cache/d", ["Content-Type: a/b", "Content-Type: c/d",
                                                                   "If-None-Match: *", "If-None-Match: \"1\""], b"x"))
    return s


def mc_seeds():
    s = {}
    s["basic"] = (WHOLE, b"set a 0 0 1\r\n1\r\nget a\r\ngets a b\r\ndelete a\r\ndelete a\r\nget a\r\n")
    # memcached -Y: refused commands, a bad block, a failure, then in and ordinary commands
    s["auth"] = (UPTO4 | MC_AUTH, b"get a\r\nmn\r\nset a 0 0 2\r\nhi\r\nset a 0 0 7\r\nfoo bab\r\n"
                 b"set a 0 0 7\r\nfoo barXY\r\nset x y z 12\r\n baaaz quux \r\nset k 0 0 1\r\nv\r\n"
                 b"get k\r\nmn\r\n")
    s["auth_bytes"] = (BYTES | MC_AUTH, b"\n\nset a 0 0 9\r\nfoo bar\x00x\r\nmg k v\r\n")
    s["auth_big_block"] = (UPTO4K | MC_AUTH, b"set a 0 0 20000\r\n" + b"u " * 8300)
    s["storage_modes"] = (UPTO16, b"add k 5 0 2\r\nv1\r\nadd k 5 0 2\r\nv2\r\nreplace k 6 0 2\r\nv3\r\n"
                          b"replace nope 0 0 1\r\nx\r\nappend k 0 0 3\r\n+ap\r\nprepend k 0 0 3\r\npp+\r\n"
                          b"gets k\r\ncas k 0 0 1 999\r\nz\r\ncas nope 0 0 1 1\r\nz\r\n")
    s["cas_success"] = (BYTES, b"set c 0 0 1\r\na\r\ngets c\r\ncas c 0 0 1 1\r\nb\r\ncas c 0 0 1 2\r\nc\r\n")
    s["arith"] = (UPTO4, b"set n 0 0 2\r\n10\r\nincr n 5\r\ndecr n 100\r\nincr n 18446744073709551615\r\n"
                  b"incr nope 1\r\nset s 0 0 3\r\nabc\r\nincr s 1\r\nincr n abc\r\ndecr n -1\r\n")
    s["touch_gat"] = (UPTO16, b"set t 0 100 1\r\nx\r\ntouch t 10\r\ntouch nope 1\r\ngat 0 t\r\n"
                      b"gats 3600 t nope\r\nset neg 0 -1 1\r\nx\r\nget neg\r\n")
    s["flush"] = (WHOLE, b"set a 0 0 1\r\na\r\nflush_all\r\nget a\r\nset b 0 0 1\r\nb\r\n"
                  b"flush_all 10 noreply\r\nflush_all -1\r\nflush_all 0\r\nget b\r\n")
    s["admin"] = (UPTO64, b"version\r\nverbosity 1\r\nverbosity\r\nstats\r\nstats items\r\nmn\r\nquit\r\nget a\r\n")
    s["noreply"] = (UPTO4, b"set a 0 0 1 noreply\r\na\r\nadd a 0 0 1 noreply\r\nb\r\n"
                    b"incr a 1 noreply\r\ndelete a noreply\r\ntouch a 1 noreply\r\nget a\r\n")
    s["errors"] = (WHOLE, b"bogus\r\nset a\r\nset a 0 0 -1\r\nset a 0 0 x\r\nset a 4294967296 0 1\r\nx\r\n"
                   b"get\r\ndelete\r\nincr\r\n" + b"get " + b"k " * 30 + b"\r\n" + b"\r\n")
    s["bad_data_chunk"] = (UPTO4, b"set a 0 0 3\r\nabcd\r\nget a\r\nset b 0 0 2\r\nxy\n\nget b\r\n")
    s["value_split_reads"] = (BYTES, b"set big 1 0 40\r\n" + b"0123456789" * 4 + b"\r\nget big\r\n")
    s["large_value_reads"] = (UPTO512 | SLOW, b"set big 1 0 3000\r\n" + b"v" * 3000 + b"\r\n"
                              + b"get big big big big big big big big\r\n" * 30)
    # issue 21: with TINY the in-flight budget is 1 KiB: a 2000-byte value is refused by it and
    # its data block (commands) swallowed; ms alike
    pad = b"x" * (2000 - len(b"set pwn 0 0 1\r\nx\r\nflush_all"))
    s["inflight_budget"] = (UPTO64 | TINY, b"set keep 0 0 1\r\nk\r\nset big 0 0 2000\r\nset pwn 0 0 1\r\nx\r\n"
                            + pad + b"flush_all\r\nms big 2000\r\n" + b"y" * 2000 + b"\r\nget keep pwn\r\n")
    s["too_large_tiny_store"] = (UPTO64 | TINY, b"set big 0 0 5000\r\n" + b"x" * 5000 + b"\r\nget big\r\n")
    s["eviction_tiny_store"] = (WHOLE | TINY, b"".join(b"set key%d 0 0 1000\r\n" % i + b"e" * 1000 + b"\r\n"
                                                      for i in range(20)) + b"get key0 key19\r\n")
    s["long_get_line"] = (UPTO512, b"get " + b" ".join(b"key%04d" % i for i in range(400)) + b"\r\n")
    s["long_line_no_newline"] = (UPTO4K, b"set " + b"k" * 3000)
    s["long_get_split_key"] = (BYTES, b"gets " + b"a" * 2100 + b" b\r\n")
    s["nul_in_line"] = (WHOLE, b"get a\x00b\r\nset a\x000 0 1\r\nx\r\n")
    s["bare_lf"] = (UPTO4, b"set a 0 0 1\nx\nget a\n")
    s["pipeline_over_max"] = (WHOLE | SLOW, b"get a\r\n" * 100)
    s["meta_get"] = (UPTO16, b"ms m 2 T0 F5\r\nhi\r\nmg m v\r\nmg m s v t f c k O123 q\r\nmg nope v\r\n"
                     b"mg nope v q\r\nmn\r\nmg m h l t N30\r\nmg m E5\r\n")
    s["meta_set_modes"] = (UPTO4, b"ms x 1 MS\r\na\r\nms x 1 ME\r\nb\r\nms x 1 MA\r\nc\r\nms x 1 MP\r\nd\r\n"
                           b"ms x 1 MR\r\ne\r\nms y 1 MR\r\nf\r\nms x 1 C1\r\ng\r\nms x 1 I\r\nh\r\n"
                           b"ms x S1 T-1\r\ni\r\nmg x v\r\n")
    s["meta_delete_arith"] = (UPTO16, b"ma n N0 J13\r\nma n\r\nma n MD D5 v\r\nma n MI D18446744073709551615 v\r\n"
                              b"md n q\r\nmd n\r\nmd n C1\r\nma n q\r\nmn\r\nms d 1\r\nx\r\nmd d I T30\r\nmg d v\r\n")
    s["meta_base64"] = (WHOLE, b"ms Zm9v 3 b\r\nbar\r\nmg Zm9v b v k\r\nmd Zm9v b\r\nmg !!!! b v\r\n")
    s["meta_errors"] = (WHOLE, b"mg\r\nms k\r\nms k abc\r\nmg k O" + b"o" * 40 + b"\r\nmg k "
                        + b"v " * 20 + b"\r\nmx k\r\nme k\r\nms k 2 MZ\r\nhi\r\n")
    s["stats_and_quit_eof"] = (UPTO64 | EOF_END, b"set a 0 0 1\r\na\r\nstats\r\nget a\r\n")
    s["partial_command_timeout"] = (WHOLE, b"set a 0 0 10\r\nabc")
    # issue 21: lines of 30+ tokens (the tokenizer keeps 23; lru/slabs read the last one)
    many = b" ".join(b"t%d" % i for i in range(30))
    s["many_tokens"] = (UPTO16, b"lru temp_ttl 5 " + many + b" noreply\r\nlru mode flat " + many
                        + b"\r\nslabs automove 1 " + many + b" noreply\r\nslabs automove ratio "
                        + many + b"\r\nlru tune 10 10 0.1 2 " + many + b"\r\nset k 0 0 1 " + many
                        + b"\r\nx\r\nmg k " + many + b"\r\nstats " + many + b"\r\nwatch " + many
                        + b"\r\nbogus " + many + b" HTTP/1.1\r\n")
    # issue 21: refused storage commands whose data blocks are command lines (swallowed)
    s["refused_blocks"] = (UPTO4, b"set keep 0 0 4\r\nsafe\r\nset user:Jos\xc3\xa9 0 0 17 noreply\r\n"
                           b"flush_all noreply\r\nset k 4294967296 0 9\r\ndelete keep\r\n"
                           b"cas " + b"k" * 251 + b" 0 0 9 1\r\nmd keep q\r\nms k\x01 9 T0\r\n"
                           b"mn\r\nget keep\r\nms " + b"k" * 251 + b" 3\r\nmn\r\n"
                           b"ms k 9 a b c d e f g h i j k l m n o p q r\r\nflush_all\r\nget keep\r\n")
    return s


def config_seeds():
    with open(os.path.join(ROOT, "config.json"), "rb") as f:
        repo = f.read()
    s = {
        "repo_config.json": repo,
        "empty_object": b"{}",
        "empty_file": b"",
        "port_only": b'{"server": {"port": 9090}}',
        "layout_custom": b'{"snowflake": {"timestamp_bits": 42, "datacenter_bits": 4, "worker_bits": 6,'
                         b' "sequence_bits": 11, "time_unit_ms": 10, "epoch": 1577836800000}}',
        "layout_bad_sum": b'{"snowflake": {"timestamp_bits": 40}}',
        "epoch_future": b'{"snowflake": {"epoch": "2999-01-01T00:00:00Z"}}',
        "epoch_fraction": b'{"snowflake": {"epoch": "2020-02-29T23:59:59.999Z"}}',
        "epoch_bad": b'{"snowflake": {"epoch": "2020-13-40T25:61:61Z"}}',
        "worker_ordinal": b'{"snowflake": {"worker_id": "ordinal"}}',
        "worker_env": b'{"snowflake": {"worker_id": "env:HOME"}}',
        "worker_too_big": b'{"snowflake": {"worker_id": 32}}',
        "unknown_key": b'{"server": {"prot": 1}}',
        "unknown_section": b'{"serve": {}}',
        "wrong_types": b'{"server": {"port": "80", "tcp_nodelay": 1, "host": 127}}',
        "negative_and_huge": b'{"server": {"port": -1, "threads": 1e400, "backlog": 1.5}}',
        "duplicate_key": b'{"server": {"port": 1, "port": 2}}',
        "nul_escape": b'{"data_dir": "a\\u0000b"}',
        "escapes": b'{"data_dir": "\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\ud83d\\ude00", "log": {"file": "\\u007f"}}',
        "not_json": b'{"server": ',
        "array_root": b'[1, 2, 3]',
        "deep_nesting": b'{"server": ' + b'[' * 200 + b']' * 200 + b'}',
        "limits_cross": b'{"server": {"max_url_bytes": 9000, "max_header_bytes": 8192}}',
        "output_limits": b'{"server": {"output_high_water_bytes": 1073741824, "output_limit_bytes": 65536}}',
        "ports_clash": b'{"cache": {"memcached_port": 8080}, "echo": {"tcp_port": 8080}}',
        "ipv6_hosts": b'{"server": {"host": "::1"}, "cache": {"memcached_host": "::", "memcached_port": 11211}}',
        "bad_host": b'{"server": {"host": "localhost"}}',
        "auth_both": b'{"auth": {"token": "s3cret", "token_file": "/run/secret"}}',
        "auth_token": b'{"auth": {"token": "s3cret", "protect_reads": true}}',
        # auth.client_certificates, the list key: good entries of each form, then bad ones
        "auth_certificates": b'{"server": {"tls": {"port": 8443, "cert_file": "c", "key_file": "k",'
                             b' "client_ca_file": "ca", "verify_client": "optional"}}, "auth":'
                             b' {"client_certificates": ["CN=orders-api,O=shop\\\\, Inc.",'
                             b' "DNS:billing.shop.svc", "URI:spiffe://td/ns/x/sa/y"],'
                             b' "credentials": "token_or_certificate"}}',
        "auth_certificates_bad": b'{"auth": {"client_certificates": ["/CN=a/O=b", "DNS:*.x",'
                                 b' "CN=\\u0001"], "credentials": "both"}}',
        "enums": b'{"snowflake": {"sync": "mutex", "default_encoding": "base32"}, "log": {"level": "debug"}}',
        "enums_bad": b'{"snowflake": {"sync": "lockfree"}}',
        "bools_strings": b'{"server": {"reuseport": "yes"}}',
        "long_string": b'{"data_dir": "' + b"d" * 1100 + b'"}',
        "peers": b'{"snowflake": {"peers": "10.0.0.1:8080,10.0.0.2:8080", "peer_timeout_ms": 49}}',
        "cache_limits": b'{"cache": {"max_memory_bytes": 1048575, "max_item_bytes": 2097152}}',
        # worker_id "etcd": the nested section, its rules, and a nesting too deep for any key
        "etcd": b'{"snowflake": {"worker_id": "etcd", "etcd": {"endpoints": "http://127.0.0.1:2379,'
                b'http://[::1]:2379", "prefix": "/sf", "ttl_s": 3, "fence_margin_ms": 500,'
                b' "request_timeout_ms": 400, "worker_min": 2, "worker_max": "max"}}}',
        "etcd_bad": b'{"snowflake": {"worker_id": "etcd", "etcd": {"endpoints": "https://h:1,h:2,'
                    b'http://h:99999", "prefix": "x/", "ttl_s": 1, "worker_max": "most"}}}',
        "etcd_nested": b'{"snowflake": {"etcd": {"tls": {"ca": "x"}}}}',
        "args_etcd": b'{}\0--worker-id\0etcd\0--set\0snowflake.etcd.endpoints=http://h:1'
                     b'\0--set\0snowflake.etcd.worker_max=max',
        # Arguments after NULs: --set, --port, --threads, --worker-id, and garbage.
        "args_set": b'{}\0--set\0server.port=1234\0--set\0snowflake.sync=spinlock\0--port\08081',
        "args_bad": b'{}\0-p\0abc\0--threads\0-1\0--worker-id\0x',
        "args_unknown": b'{}\0--nope\0-z\0extra',
        "args_set_bad": b'{}\0--set\0nokey\0--set\0=x\0--set\0server.prot=1',
        "args_missing_value": b'{}\0--port',
    }
    return s


def id_seeds():
    mx = 2**64 - 1
    some = SOME_ID
    s = {
        "dec_zero": b"0", "dec_some": str(some).encode(), "dec_max": str(mx).encode(),
        "dec_overflow": str(mx + 1).encode(), "dec_leading_zeros": b"00000000000000000042",
        "dec_too_long": b"000000000000000000042", "dec_sign": b"+42",
        "hex_some": f"{some:016x}".encode(), "hex_upper": f"{some:016X}".encode(),
        "hex_max": b"ffffffffffffffff", "hex_short": b"1f",
        "base62_some": enc(some, B62, 11).encode(), "base62_max": enc(mx, B62, 11).encode(),
        "base62_overflow": enc(mx + 1, B62, 11).encode(), "base62_top": b"zzzzzzzzzzz",
        "base32_some": enc(some, B32, 13).encode(), "base32_max": enc(mx, B32, 13).encode(),
        "base32_aliases": b"oilOIL0000001", "base32_lower": enc(some, B32, 13).lower().encode(),
        "base32_overflow": b"G000000000000", "base32_hyphen": b"0SB5-JKS2G000",
        "name_dec": b"dec", "name_decimal": b"decimal", "name_hex": b"hex",
        "name_base62": b"base62", "name_base32": b"base32",
        "two_values": (some).to_bytes(8, "little") + (some + 1).to_bytes(8, "little"),
        "two_values_extremes": b"\xff" * 8 + b"\x00" * 8,
        # UUIDs (RFC 9562 A.6's UUIDv7 in both cases and compact; a v4; bad lengths, digits,
        # hyphens) and ULIDs (the spec's example, the largest, one past it, aliases, lower case)
        "uuid7_rfc9562": b"017f22e2-79b0-7cc3-98c4-dc0c0c07398f",
        "uuid7_rfc9562_upper": b"017F22E2-79B0-7CC3-98C4-DC0C0C07398F",
        "uuid7_compact": b"017f22e279b07cc398c4dc0c0c07398f",
        "uuid4": b"5b30857f-0bfa-48b5-ac0b-5c64e28078d1",
        "uuid_variant_ncs": b"017f22e2-79b0-7cc3-18c4-dc0c0c07398f",
        "uuid_braces": b"{017f22e2-79b0-7cc3-98c4-dc0c0c07398f}",
        "uuid_hyphen_moved": b"017f22e279-b0-7cc3-98c4dc0c0c07398f",
        "uuid_bad_digit": b"017f22e2-79b0-7cc3-98c4-dc0c0c07398g",
        "uuid_bounds_max": b"019c167f-cbff-7fff-bfff-ffffffffffff",
        "ulid_spec": b"01ARZ3NDEKTSV4RRFFQ69G5FAV",
        "ulid_lower": b"01arz3ndektsv4rrffq69g5fav",
        "ulid_max": b"7ZZZZZZZZZZZZZZZZZZZZZZZZZ",
        "ulid_overflow": b"80000000000000000000000000",
        "ulid_aliases": b"0IL0O1LIOOOOOOOOOOOOOOOOOO",
        "ulid_u": b"01ARZ3NDEKTSV4RRFFQ69G5FAU",
        # TypeIDs (snowflake/typeid.h), from the spec's valid.yml / invalid.yml
        "typeid_v7": b"prefix_01h455vb4pex5vsknk084sn02q",
        "typeid_bare_max": b"7zzzzzzzzzzzzzzzzzzzzzzzzz",
        "typeid_underscores": b"pre_fix_00000000000000000000000000",
        "typeid_prefix_63": b"abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijk"
                            b"_01h455vb4pex5vsknk084sn02q",
        "typeid_prefix_end_underscore": b"prefix__00000000000000000000000000",
        "typeid_separator_only": b"_00000000000000000000000000",
        "typeid_upper_suffix": b"prefix_0123456789ABCDEFGHJKMNPQRS",
        "typeid_crockford_alias": b"prefix_i23456789ol23456789oi23456",
        "typeid_overflow": b"prefix_8zzzzzzzzzzzzzzzzzzzzzzzzz",
        # times (util/rfc3339.h): forms, fractions to round, offsets, every refusal
        "time_z": b"2026-01-01T00:00:00Z",
        "time_lower": b"2026-01-01t00:00:00.250z",
        "time_offset": b"2026-01-01T01:00:00.250+01:00",
        "time_offset_negative": b"2025-12-31T19:30:00-04:30",
        "time_long_fraction": b"2026-01-01T00:00:00.123456789012345678901234567890Z",
        "time_ceil_past_end": b"9999-12-31T23:59:59.9991Z",
        "time_floor_before_1970": b"1969-12-31T23:59:59.9995Z",
        "time_leap_second": b"2016-12-31T23:59:60Z",
        "time_feb_29": b"2023-02-29T00:00:00Z",
        "time_space_offset": b"2026-01-01T01:00:00 01:00",
        "time_unix_ms": b"1767225600000",
        "time_unix_ms_max": b"253402300799999",
        "time_unix_ms_over": b"253402300800000",
        "time_no_zone": b"2026-01-01T00:00:00",
        "time_offset_max": b"2026-01-01T00:00:00-23:59",
        # bounds: 40 bytes = a layout and three instants (fuzz_ids.c, layout_from)
        "bounds_twitter_month": bytes([12, 5, 5, 40, 0, 0, 0, 1])
        + (1577836800000).to_bytes(8, "little") + (189388800000).to_bytes(8, "little")
        + (2678400000).to_bytes(8, "little") + (2419200000).to_bytes(8, "little"),
        "bounds_sonyflake_short": bytes([8, 8, 8, 38, 9, 0, 1, 2])
        + (1409529600000).to_bytes(8, "little") + (12345678901).to_bytes(8, "little")
        + (25).to_bytes(8, "little") + (7).to_bytes(8, "little"),
        "bounds_raw_invalid": bytes([12, 5, 5, 40, 0, 0, 0, 0]) + b"\xff" * 32,
        "bounds_id128": bytes([0] * 7 + [4]) + b"\x01" * 8 + (1767225600000).to_bytes(8, "little")
        + (2678400000).to_bytes(8, "little") + b"\xaa" * 8,
    }
    return s


# fuzz_tls: byte 0 the scenario (fuzz_tls.c), byte 1 the splitter's flag byte, then the payload.
TLS_RAW, TLS_13, TLS_12, TLS_13_RAW = range(4)
TLS_MTLS = 0x04
TLS_ALPN_HTTP11, TLS_ALPN_H2, TLS_ALPN_BOTH = 0x08, 0x10, 0x18
TLS_FIN = 0x20
TLS_LAZY = 0x40
TLS_EXTRA = 0x80


def client_hello(version=None, alpn=None, sni="localhost"):
    """The first flight of Python's (OpenSSL's) TLS client: a real ClientHello record."""
    import ssl
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if version:
        ctx.minimum_version = ctx.maximum_version = version
    if alpn:
        ctx.set_alpn_protocols(alpn)
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(incoming, outgoing, server_side=False, server_hostname=sni)
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


def record(ctype, body, version=b"\x03\x03"):
    return bytes([ctype]) + version + len(body).to_bytes(2, "big") + body


def tls_seeds():
    import ssl
    h13 = client_hello(ssl.TLSVersion.TLSv1_3, ["http/1.1"])
    h12 = client_hello(ssl.TLSVersion.TLSv1_2, ["http/1.1"])
    hany = client_hello(None, ["h2", "http/1.1"])
    bare = client_hello(ssl.TLSVersion.TLSv1_3, None, sni=None)
    msg = h13[5:]  # the handshake message without its record header
    half = len(msg) // 2
    s = {
        # raw first flights (mode 0): real ClientHellos, whole and in small writes
        "hello-tls13-alpn": (TLS_RAW, WHOLE, h13),
        "hello-tls12-alpn": (TLS_RAW, WHOLE, h12),
        "hello-any-h2-http11": (TLS_RAW, WHOLE, hany),
        "hello-tls13-no-alpn-no-sni": (TLS_RAW, WHOLE, bare),
        "hello-tls13-bytewise": (TLS_RAW, BYTES, h13),
        "hello-tls12-upto16": (TLS_RAW, UPTO16, h12),
        "hello-mtls-listener": (TLS_RAW | TLS_MTLS, WHOLE, h13),
        "hello-then-fin": (TLS_RAW | TLS_FIN, WHOLE, h13),
        # the message cut over two records (legal), and a record that lies about its length
        "hello-two-records": (TLS_RAW, WHOLE, record(22, msg[:half], h13[1:3])
                              + record(22, msg[half:], h13[1:3])),
        "hello-length-too-long": (TLS_RAW, WHOLE, h13[:3] + b"\x48\x00" + h13[5:]),
        "hello-truncated": (TLS_RAW | TLS_FIN, WHOLE, h13[: len(h13) // 3]),
        "garbage-before-hello": (TLS_RAW, WHOLE, b"\x00\x01garbage\r\n" + h13),
        "plaintext-http": (TLS_RAW, WHOLE, b"GET /id HTTP/1.1\r\nHost: localhost\r\n\r\n"),
        "plaintext-memcached": (TLS_RAW, UPTO4, b"get foo\r\nversion\r\n"),
        "proxy-protocol-v1": (TLS_RAW, WHOLE, b"PROXY TCP4 127.0.0.1 127.0.0.1 1 2\r\n" + h13),
        "sslv2-hello": (TLS_RAW, WHOLE, bytes.fromhex("802e0103010015000000100100800300800700c006"
                                                        "004000400010040080000000ff")
                        + b"\x11" * 16),
        "alert-first": (TLS_RAW, WHOLE, record(21, b"\x02\x28")),
        "ccs-first": (TLS_RAW, WHOLE, record(20, b"\x01")),
        "appdata-first": (TLS_RAW, WHOLE, record(23, b"\x00" * 40)),
        "heartbeat-record": (TLS_RAW, WHOLE, record(24, b"\x01\x40\x00" + b"A" * 16)),
        "garbage": (TLS_RAW, HALVES, bytes(range(256))),
        "empty": (TLS_RAW | TLS_FIN, WHOLE, b""),
        # a real client, then application data echoed back (modes 1, 2)
        "tls13-echo": (TLS_13 | TLS_ALPN_HTTP11, WHOLE, b"hello over TLS 1.3\n"),
        "tls13-echo-pieces": (TLS_13, UPTO64, b"GET /id HTTP/1.1\r\nHost: x\r\n\r\n" * 8),
        "tls13-echo-big-lazy": (TLS_13 | TLS_LAZY, UPTO4K, bytes(range(256)) * 15),
        "tls13-key-update": (TLS_13 | TLS_EXTRA, UPTO16, b"after a KeyUpdate\n" * 4),
        "tls13-fin": (TLS_13 | TLS_FIN, WHOLE, b"bye\n"),
        "tls13-alpn-h2-refused": (TLS_13 | TLS_ALPN_H2, WHOLE, b"never sent\n"),
        "tls13-alpn-both": (TLS_13 | TLS_ALPN_BOTH, WHOLE, b"http/1.1 chosen\n"),
        "tls13-mtls": (TLS_13 | TLS_MTLS, WHOLE, b"with a client certificate\n"),
        "tls12-echo": (TLS_12 | TLS_ALPN_HTTP11, WHOLE, b"hello over TLS 1.2\n"),
        "tls12-renegotiate": (TLS_12 | TLS_EXTRA, UPTO16, b"renegotiation refused\n"),
        "tls12-mtls-lazy": (TLS_12 | TLS_MTLS | TLS_LAZY, UPTO512, b"x" * 3000),
        # a handshake, then raw bytes on the socket (mode 3)
        "after-handshake-garbage": (TLS_13_RAW, WHOLE, bytes(range(64))),
        "after-handshake-hello": (TLS_13_RAW, WHOLE, h13),
        "after-handshake-plain-appdata": (TLS_13_RAW, WHOLE, record(23, b"GET / HTTP/1.1\r\n\r\n")),
        "after-handshake-alert": (TLS_13_RAW | TLS_FIN, WHOLE, record(21, b"\x01\x00")),
        "mtls-no-client-cert": (TLS_13_RAW | TLS_MTLS | TLS_EXTRA, WHOLE, b"\x17\x03\x03\x00\x01x"),
    }
    return s


def write(dir_, name, data):
    os.makedirs(dir_, exist_ok=True)
    with open(os.path.join(dir_, name), "wb") as f:
        f.write(data)


def main():
    corpus = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "corpus")
    for name, (flags, data) in http_seeds().items():
        write(os.path.join(corpus, "fuzz_http"), name, bytes([flags]) + data)
    for name, (flags, data) in mc_seeds().items():
        write(os.path.join(corpus, "fuzz_memcache"), name, bytes([flags]) + data)
    for name, data in config_seeds().items():
        write(os.path.join(corpus, "fuzz_config"), name, data)
    for name, data in id_seeds().items():
        write(os.path.join(corpus, "fuzz_ids"), name, data)
    for name, (flags, split, data) in tls_seeds().items():
        write(os.path.join(corpus, "fuzz_tls"), name, bytes([flags, split]) + data)


if __name__ == "__main__":
    main()
