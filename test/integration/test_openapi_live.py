"""Every documented operation of service/openapi.yaml sent to a live daemon: every status, header
and body it answers must be one the document declares.

Three daemons (loopback, ephemeral ports): no token; a token (cache writes need it); a token with
auth.protect_reads (every route but /healthz and /readyz needs it). Each gets the same probes: for
every path and method of the document, requests meant to reach each status it can answer (200 in
JSON and text, 201/204/304/400/404/409/412/413 ... ), sent with the token where one is set, then
all of them again without it (401 where the route's access rule says so). Besides, per path a
method it does not take (405, whose Allow must name exactly the path's documented methods), an
unknown path (404), and protocol-level refusals (413 body over server.max_body_bytes on
POST /echo, 501 for a Transfer-Encoding other than chunked).

For each answer: the status is declared by the operation (protocol-level refusals: by the
components/responses entry the description names), every header the response declares is sent,
the Content-Type matches a declared media type, and a JSON body validates against the declared
schema (python3-jsonschema, draft 4 as OpenAPI 3.0's schema objects; `nullable` read as OpenAPI
3.0.3 defines it: it adds null to a `type` given beside it, and nothing without one); a response
that declares no content has an empty body. Run as ctest openapi_live does:
`python3 -m unittest -v test_openapi_live` from test/integration with SNOWFLAKED_BIN set."""
import copy
import json
import os
import re
import unittest

import jsonschema
import yaml

import sfharness
from sfharness import Server, request

SPEC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "service",
                    "openapi.yaml")
TOKEN = "openapi-live-token-0123456789"
METHODS = ("get", "head", "put", "post", "delete")
# Refusals any request can get before routing, by status: the components/responses entry that
# documents each (service/openapi.yaml's description lists them).
PROTOCOL = {400: "MalformedRequest", 408: "RequestTimeout", 413: "PayloadTooLarge",
            414: "UriTooLong", 417: "ExpectationFailed", 431: "HeaderFieldsTooLarge",
            501: "NotImplemented", 505: "HttpVersionNotSupported"}


def load_spec():
    with open(SPEC, encoding="utf-8") as f:
        return yaml.safe_load(f)


def deref(spec, node):
    """node with every $ref replaced by its target (the document has no cycles)."""
    if isinstance(node, dict):
        if "$ref" in node:
            target = spec
            for part in node["$ref"].lstrip("#/").split("/"):
                target = target[part]
            return deref(spec, target)
        return {k: deref(spec, v) for k, v in node.items()}
    if isinstance(node, list):
        return [deref(spec, v) for v in node]
    return node


def json_schema(schema):
    """An OpenAPI 3.0 schema object as JSON Schema draft 4: nullable per 3.0.3 (adds null to the
    type beside it, nothing without one); example and the like are ignored by the validator."""
    if isinstance(schema, list):
        return [json_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: json_schema(v) for k, v in schema.items() if k not in ("nullable", "example")}
    if schema.get("nullable") and "type" in schema:
        out["type"] = [schema["type"], "null"]
        if "enum" in out:
            out["enum"] = out["enum"] + [None]
    return out


def media_matches(declared, actual):
    """A declared media type key ("text/plain; version=0.0.4", "*/*") against a Content-Type."""
    if declared == "*/*":
        return True
    d = [p.strip().lower() for p in declared.split(";")]
    a = [p.strip().lower() for p in (actual or "").split(";")]
    return d[0] == a[0] and set(d[1:]) <= set(a[1:])


def template_of(spec, path):
    """The documented path template a request path falls under, or None."""
    for tpl in spec["paths"]:
        rx = "^" + re.sub(r"\\\{[^/]+\\\}", "[^/]+", re.escape(tpl)) + "$"
        if tpl == "/cache/{key}":
            rx = r"^/cache/.+$"  # a key may hold '/' (percent-encoded or not)
        if re.match(rx, path) and not (tpl == "/cache/{key}" and re.search(r"/(incr|decr)$",
                                                                           path)):
            return tpl
    return None


class Probe:
    def __init__(self, method, target, body=b"", headers="", want=None, protocol=False):
        """protocol: a refusal any request gets before routing, judged by PROTOCOL."""
        self.method, self.target, self.body = method, target, body
        self.headers, self.want, self.protocol = headers, want, protocol

    def raw(self, token):
        auth = "Authorization: Bearer %s\r\n" % token if token else ""
        length = "" if "Transfer-Encoding" in self.headers else \
            "Content-Length: %d\r\n" % len(self.body) if self.body or self.method in (
                "PUT", "POST") else ""
        return ("%s %s HTTP/1.1\r\nHost: t\r\n%s%s%s\r\n" % (
            self.method, self.target, auth, length, self.headers)).encode() + self.body

    def __repr__(self):
        return "%s %s" % (self.method, self.target)


def probes():
    """(setup probes, checked probes): the setup stores what the checked ones read."""
    big_value = b"v" * 2048   # over cache.max_item_bytes (1024), under server.max_body_bytes
    big_body = b"b" * 8192    # over server.max_body_bytes (4096)
    setup = [Probe("PUT", "/cache/present", b"41"), Probe("PUT", "/cache/word", b"abc"),
             Probe("PUT", "/cache/typed", b"<p>", "Content-Type: text/html\r\n"),
             Probe("PUT", "/cache/gone", b"x")]
    checked = [
        Probe("GET", "/id", want=200), Probe("GET", "/id?format=text", want=200),
        Probe("GET", "/id", headers="Accept: text/plain\r\n", want=200),
        Probe("GET", "/id?encoding=bogus", want=400), Probe("HEAD", "/id", want=200),
        Probe("HEAD", "/id?format=bogus", want=400),
        Probe("GET", "/ids?count=3", want=200), Probe("GET", "/ids?count=3&format=text", want=200),
        Probe("GET", "/ids?count=0", want=400), Probe("HEAD", "/ids?count=2", want=200),
        Probe("HEAD", "/ids?count=x", want=400),
        Probe("GET", "/id/915000981970747392", want=200), Probe("GET", "/id/zzz", want=400),
        Probe("HEAD", "/id/915000981970747392", want=200), Probe("HEAD", "/id/zzz", want=400),
        Probe("GET", "/uuid", want=200), Probe("GET", "/uuid?format=text", want=200),
        Probe("GET", "/uuid?encoding=bogus", want=400), Probe("HEAD", "/uuid", want=200),
        Probe("HEAD", "/uuid?encoding=bogus", want=400),
        Probe("GET", "/uuids?count=2", want=200), Probe("GET", "/uuids?count=0", want=400),
        Probe("HEAD", "/uuids?count=2", want=200), Probe("HEAD", "/uuids?count=0", want=400),
        Probe("GET", "/uuid/01a234db-6b04-7000-8000-743da37b0d4e", want=200),
        Probe("GET", "/uuid/not-a-uuid", want=400),
        Probe("HEAD", "/uuid/01a234db-6b04-7000-8000-743da37b0d4e", want=200),
        Probe("HEAD", "/uuid/not-a-uuid", want=400),
        Probe("GET", "/ulid", want=200), Probe("GET", "/ulid?format=text", want=200),
        Probe("GET", "/ulid?encoding=hex", want=400), Probe("HEAD", "/ulid", want=200),
        Probe("HEAD", "/ulid?encoding=hex", want=400),
        Probe("GET", "/ulids?count=2", want=200), Probe("GET", "/ulids?count=0", want=400),
        Probe("HEAD", "/ulids?count=2", want=200), Probe("HEAD", "/ulids?count=0", want=400),
        Probe("GET", "/ulid/01M8TDPTST000016GW47ZMNYPW", want=200),
        Probe("GET", "/ulid/U1M8TDPTST000016GW47ZMNYPW", want=400),
        Probe("HEAD", "/ulid/01M8TDPTST000016GW47ZMNYPW", want=200),
        Probe("HEAD", "/ulid/U1M8TDPTST000016GW47ZMNYPW", want=400),
        Probe("GET", "/typeid?prefix=user", want=200), Probe("GET", "/typeid", want=200),
        Probe("GET", "/typeid?prefix=user&format=text", want=200),
        Probe("GET", "/typeid?prefix=User", want=400),
        Probe("HEAD", "/typeid?prefix=user", want=200),
        Probe("HEAD", "/typeid?prefix=_user", want=400),
        Probe("GET", "/typeids?count=2&prefix=user", want=200),
        Probe("GET", "/typeids?count=0", want=400),
        Probe("HEAD", "/typeids?count=2", want=200), Probe("HEAD", "/typeids?count=0", want=400),
        Probe("GET", "/typeid/user_01m8y5mgfhe00b423afx7gcm7z", want=200),
        Probe("GET", "/typeid/prefix_0123456789abcdefghjkmnpqrs", want=200),
        Probe("GET", "/typeid/user_01m8y5mgfhe00b423afx7gcm7z?prefix=team", want=400),
        Probe("GET", "/typeid/user__01m8y5mgfhe00b423afx7gcm7z", want=400),
        Probe("HEAD", "/typeid/user_01m8y5mgfhe00b423afx7gcm7z", want=200),
        Probe("HEAD", "/typeid/user_81m8y5mgfhe00b423afx7gcm7z", want=400),
        Probe("GET", "/bounds?from=2026-01-01T00:00:00Z&to=2026-02-01T00:00:00Z", want=200),
        Probe("GET", "/bounds?from=2026-01-01T00:00:00Z&to=2026-01-01T00:00:00Z", want=200),
        Probe("GET", "/bounds?from=2026-01-01T00:00:00Z&to=2026-02-01T00:00:00Z&type=uuid7",
              want=200),
        Probe("GET", "/bounds?from=2026-01-01T00:00:00Z&to=2026-02-01T00:00:00Z&type=ulid",
              want=200),
        Probe("GET", "/bounds?from=2026-01-01T00:00:00Z&to=2026-02-01T00:00:00Z&type=typeid"
              "&prefix=user", want=200),
        Probe("GET", "/bounds?from=2026-01-01T00:00:00Z&to=2026-02-01T00:00:00Z&prefix=user",
              want=400),
        Probe("GET", "/bounds?from=2026-01-01T00:00:00Z&to=2026-02-01T00:00:00Z&json_ids=number"
              "&type=snowflake", want=None),
        Probe("GET", "/bounds?from=x&to=y", want=400),
        Probe("HEAD", "/bounds?from=2026-01-01T00:00:00Z&to=2026-02-01T00:00:00Z", want=200),
        Probe("HEAD", "/bounds?from=x", want=400),
        Probe("GET", "/healthz", want=200), Probe("HEAD", "/healthz", want=200),
        Probe("GET", "/readyz", want=200), Probe("HEAD", "/readyz", want=200),
        Probe("GET", "/metrics", want=200), Probe("HEAD", "/metrics", want=200),
        Probe("GET", "/cache/present", want=200), Probe("GET", "/cache/typed", want=200),
        Probe("GET", "/cache/absent", want=404), Probe("GET", "/cache/" + "k" * 251, want=400),
        Probe("GET", "/cache/present", headers='If-None-Match: *\r\n', want=304),
        Probe("HEAD", "/cache/present", want=200), Probe("HEAD", "/cache/absent", want=404),
        Probe("HEAD", "/cache/present", headers='If-None-Match: *\r\n', want=304),
        Probe("PUT", "/cache/new", b"1", want=201), Probe("PUT", "/cache/new", b"2", want=204),
        Probe("PUT", "/cache/new?ttl=100", b"3", want=204),
        Probe("PUT", "/cache/new?ttl=-1", b"3", want=400),
        Probe("PUT", "/cache/new", b"4", 'If-None-Match: *\r\n', want=412),
        Probe("PUT", "/cache/new", b"4", 'If-Match: "999999"\r\n', want=412),
        Probe("PUT", "/cache/big", big_value, want=413),
        Probe("DELETE", "/cache/gone", want=204), Probe("DELETE", "/cache/gone", want=404),
        Probe("DELETE", "/cache/present", headers='If-Match: "999999"\r\n', want=412),
        Probe("POST", "/cache/present/incr", want=200),
        Probe("POST", "/cache/present/incr?by=5", want=200),
        Probe("POST", "/cache/present/incr?by=x", want=400),
        Probe("POST", "/cache/absent/incr", want=404), Probe("POST", "/cache/word/incr", want=409),
        Probe("POST", "/cache/present/decr", want=200),
        Probe("POST", "/cache/present/decr?by=-1", want=400),
        Probe("POST", "/cache/absent/decr", want=404), Probe("POST", "/cache/word/decr", want=409),
        Probe("GET", "/echo?msg=hello%20there", want=200), Probe("GET", "/echo", want=400),
        Probe("HEAD", "/echo?msg=x", want=200), Probe("HEAD", "/echo", want=400),
        Probe("POST", "/echo", b"payload", "Content-Type: application/x-thing\r\n", want=200),
        Probe("POST", "/echo", b"", want=200),
        Probe("POST", "/echo", big_body, want=413, protocol=True),  # at the head, before 401
        Probe("POST", "/echo", b"5\r\nhello\r\n0\r\n\r\n",
              "Transfer-Encoding: gzip, chunked\r\n", want=501, protocol=True),
        Probe("GET", "/no/such/route", want=404), Probe("PUT", "/no/such/route", b"x", want=404),
        # segment mode: the daemons have the namespaces "present" and "once" (one number)
        Probe("GET", "/seq/present", want=200), Probe("GET", "/seq/present?format=text", want=200),
        Probe("GET", "/seq/present?json_ids=string", want=200),
        Probe("GET", "/seq/present?json_ids=bogus", want=400),
        Probe("HEAD", "/seq/present", want=200), Probe("GET", "/seq/absent", want=404),
        Probe("HEAD", "/seq/absent", want=404), Probe("GET", "/seq/once", want=None),
        Probe("GET", "/seq/once", want=410), Probe("HEAD", "/seq/once", want=None),
        Probe("GET", "/seqs/present?count=3", want=200),
        Probe("GET", "/seqs/present?count=3&format=text", want=200),
        Probe("GET", "/seqs/present?count=0", want=400),
        Probe("GET", "/seqs/present?count=101", want=400),  # above the block
        Probe("HEAD", "/seqs/present?count=2", want=200),
        Probe("GET", "/sequences", want=200), Probe("HEAD", "/sequences", want=200),
        Probe("PUT", "/seq/made", b"{}", "Content-Type: application/json\r\n", want=403),
    ]
    return setup, checked


class OpenApiLive(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not sfharness.BINARY:
            raise unittest.SkipTest("SNOWFLAKED_BIN not set")
        cls.spec = load_spec()

    def start(self, *sets, env=None):
        server = Server(*sfharness.set_args(
            "cache.max_item_bytes=1024", "server.max_body_bytes=4096",
            'sequences.namespaces=[{"name":"present","block":100},'
            '{"name":"once","start":7,"max":7,"block":1}]', *sets), env=env)
        self.addCleanup(server.stop)
        sfharness.wait_ready(server)
        return server

    def send(self, server, probe, token):
        return request(server, probe.raw(token), head_only=probe.method == "HEAD")

    # ---- the judge ---------------------------------------------------------------------------

    def declared(self, probe, resp):
        """What the document declares for this answer: (response object, where), or fails."""
        path = probe.target.split("?", 1)[0]
        tpl = template_of(self.spec, path)
        if probe.protocol:
            name = PROTOCOL.get(resp.status)
            self.assertIsNotNone(name, "%r: %d is no documented protocol-level refusal"
                                 % (probe, resp.status))
            self.assertIn(name, self.spec["components"]["responses"])
            return deref(self.spec, self.spec["components"]["responses"][name]), name
        if tpl is None:
            self.assertEqual(resp.status, 404, "%r: an undocumented path answered" % probe)
            return deref(self.spec, self.spec["components"]["responses"]["NotFound"]), "NotFound"
        ops = self.spec["paths"][tpl]
        method = probe.method.lower()
        if method not in ops:
            self.assertEqual(resp.status, 405, "%r: an undocumented method answered" % probe)
            allow = {m.strip() for m in (resp.header("allow") or "").split(",")}
            self.assertEqual(allow, {m.upper() for m in ops if m in METHODS},
                             "%r: Allow is not the path's documented methods" % probe)
            return (deref(self.spec, self.spec["components"]["responses"]["MethodNotAllowed"]),
                    "MethodNotAllowed")
        responses = ops[method]["responses"]
        self.assertIn(str(resp.status), responses,
                      "%r answered %d, which %s %s does not declare (it declares %s): %r"
                      % (probe, resp.status, method, tpl, sorted(responses), resp.body[:200]))
        return deref(self.spec, responses[str(resp.status)]), "%s %s %d" % (method, tpl,
                                                                              resp.status)

    def judge(self, probe, resp):
        declared, where = self.declared(probe, resp)
        for name in declared.get("headers", {}):
            self.assertIsNotNone(resp.header(name), "%r (%s): declared header %s not sent"
                                 % (probe, where, name))
        content = declared.get("content")
        ctype = resp.header("content-type")
        if probe.method == "HEAD":
            return
        if not content:
            self.assertEqual(resp.body, b"", "%r (%s) declares no content, got %r"
                             % (probe, where, resp.body[:100]))
            return
        matches = [m for m in content if media_matches(m, ctype)]
        self.assertTrue(matches, "%r (%s): Content-Type %r is none of %s"
                        % (probe, where, ctype, sorted(content)))
        media = content[matches[0]]
        if "schema" in media and ctype and ctype.startswith("application/json"):
            body = json.loads(resp.body)
            try:
                jsonschema.Draft4Validator(json_schema(media["schema"])).validate(body)
            except jsonschema.ValidationError as e:
                self.fail("%r (%s): body %s does not match the schema: %s"
                          % (probe, where, resp.body[:300], e.message))

    # ---- the runs ---------------------------------------------------------------------------

    def run_all(self, server, token):
        setup, checked = probes()
        for p in setup:
            self.assertIn(self.send(server, p, token).status, (201, 204), p)
        seen = {}
        for p in checked:
            with self.subTest(probe=repr(p), token=bool(token)):
                resp = self.send(server, p, token)
                seen[repr(p)] = resp.status
                if p.want is not None:
                    self.assertEqual(resp.status, p.want, "%r: %r" % (p, resp.body[:200]))
                self.judge(p, resp)
        # a method each documented path does not take, on each path
        for tpl, ops in self.spec["paths"].items():
            path = re.sub(r"\{[^}]+\}", "present", tpl)
            for method in ("PATCH", "OPTIONS") + tuple(m.upper() for m in METHODS
                                                       if m not in ops):
                p = Probe(method, path)
                with self.subTest(probe=repr(p), token=bool(token)):
                    resp = self.send(server, p, token)
                    self.assertEqual(resp.status, 405, "%r: %r" % (p, resp.body[:200]))
                    self.judge(p, resp)
        return seen

    def unauthorised(self, server, reads_protected):
        """Every probe again without the token: 401 where the route's rule says, else as before;
        every answer declared either way."""
        setup, checked = probes()
        for p in checked:
            with self.subTest(probe=repr(p), token=False):
                resp = self.send(server, p, None)
                path = p.target.split("?", 1)[0]
                write = p.method in ("PUT", "DELETE") or (p.method == "POST" and
                                                          path.startswith("/cache/"))
                guarded = template_of(self.spec, path) is not None and not p.protocol and (
                    write or (reads_protected and path not in ("/healthz", "/readyz")))
                if guarded:
                    self.assertEqual(resp.status, 401, "%r: %r" % (p, resp.body[:200]))
                    self.assertTrue(resp.header("www-authenticate", ).startswith("Bearer"))
                elif p.want is not None and p.want != 304:
                    self.assertNotEqual(resp.status, 401, p)
                self.judge(p, resp)

    def test_without_a_token(self):
        self.run_all(self.start(), None)

    def test_with_a_token_for_writes(self):
        server = self.start(env={"SNOWFLAKED_AUTH_TOKEN": TOKEN})
        self.run_all(server, TOKEN)
        self.unauthorised(server, reads_protected=False)

    def test_with_a_token_for_everything(self):
        server = self.start("auth.protect_reads=true", env={"SNOWFLAKED_AUTH_TOKEN": TOKEN})
        self.run_all(server, TOKEN)
        self.unauthorised(server, reads_protected=True)

    def test_the_judge_rejects_what_it_should(self):
        """The judge is awake: an undeclared status, a body off its schema, a wrong Allow and a
        wrong Content-Type are findings."""
        class R:
            def __init__(self, status, body, headers):
                self.status, self.body, self._h = status, body, headers

            def header(self, name):
                return self._h.get(name)

        json_ct = {"content-type": "application/json"}
        bad = [(Probe("GET", "/id"), R(418, b'{"error":"x"}', json_ct)),
               (Probe("GET", "/id"), R(200, b'{"ids":"x"}', json_ct)),
               (Probe("GET", "/id"), R(200, b'1', {"content-type": "text/html"})),
               (Probe("PATCH", "/id"), R(405, b'{"error":"x"}', dict(json_ct, allow="GET"))),
               (Probe("GET", "/bounds"), R(200, json.dumps({
                   "type": "snowflake", "from_ms": 1, "to_ms": 1, "first_tick_ms": 1,
                   "end_tick_ms": 1, "min": "1", "max": None, "end": "1", "empty": 3}).encode(),
                   json_ct))]
        for probe, resp in bad:
            with self.subTest(probe=repr(probe), status=resp.status):
                with self.assertRaises(AssertionError):
                    self.judge(probe, resp)


if __name__ == "__main__":
    unittest.main()
