"""Keeps service/openapi.yaml a valid OpenAPI 3.0 document and in sync with the route table
(api_register in service/src/api/admin.c).

Validity: the document must pass @seriousme/openapi-schema-validator (pinned in
test/judges/package.json, installed by test/judges/install.sh, ctest judges_install), which
checks it against the OpenAPI Initiative's own JSON Schema for 3.0 and resolves every $ref. The
validator is shown to be awake on a copy with a known mistake. SNOWFLAKED_NO_NPM=1 skips that
part, as it skips the other npm judges. What the live daemon answers is checked against the
document by test_openapi_live.py.

Sync, without a YAML library: the spec's paths are the 2-space-indented keys under the top-level
`paths:` key, their operations the 4-space-indented keys below each.
Run from anywhere as `python3 test/integration/test_openapi.py -v`, or as ctest does, from
test/integration: `python3 -m unittest -v test_openapi`. (`python3 -m unittest
test/integration/test_openapi.py` from the repository root cannot work: it imports the module as
test.integration.test_openapi, and Python's own `test` package shadows this directory, which has
no __init__.py.)"""
import os
import re
import subprocess
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SPEC = os.path.join(ROOT, "service", "openapi.yaml")
ADMIN = os.path.join(ROOT, "service", "src", "api", "admin.c")
SEQ = os.path.join(ROOT, "service", "src", "api", "seq.c")  # api_seq_register, from api_register
JUDGES = os.path.join(ROOT, "test", "judges")
VALIDATOR = os.path.join(JUDGES, "node_modules", "@seriousme", "openapi-schema-validator", "bin",
                         "validate-api-cli.js")
NO_NPM = os.environ.get("SNOWFLAKED_NO_NPM") == "1"


def validate_document(path):
    """(valid, the validator's report) for an OpenAPI document file."""
    if NO_NPM:
        raise unittest.SkipTest("SNOWFLAKED_NO_NPM=1: the npm OpenAPI validator is skipped")
    if not os.path.isfile(VALIDATOR):
        raise AssertionError("OpenAPI validator not installed: run sh test/judges/install.sh "
                             "(or set SNOWFLAKED_NO_NPM=1 to skip it)")
    try:
        p = subprocess.run(["node", VALIDATOR, path], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=60)
    except FileNotFoundError:
        raise AssertionError("node not found: run sh test/judges/install.sh")
    return p.returncode == 0, p.stdout.decode(errors="replace")


def _key(line, indent):
    """The mapping key of a line at exactly `indent` spaces, or None."""
    m = re.match(r"^ {%d}(?! )(\"[^\"]*\"|'[^']*'|[^\s#'\"][^:]*?):(\s|$)" % indent, line)
    if not m:
        return None
    k = m.group(1)
    return k[1:-1] if k[0] in "'\"" else k


def spec_paths():
    """{path: set of operation keys} under the top-level `paths:`."""
    paths, cur, inside = {}, None, False
    with open(SPEC, encoding="utf-8") as f:
        for raw in f:
            line = raw.rstrip("\n")
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            top = _key(line, 0)
            if top is not None:
                inside = top == "paths"
                cur = None
                continue
            if not inside:
                continue
            p = _key(line, 2)
            if p is not None:
                cur = p
                paths[cur] = set()
                continue
            op = _key(line, 4)
            if op is not None and cur is not None:
                paths[cur].add(op)
    return paths


def registered_routes():
    """Paths of api_register's route table and of api_seq_register's (segment mode, which
    api_register calls); a prefix route "/x/" becomes "/x/{...}"."""
    bodies = []
    for path, fn in ((ADMIN, "api_register"), (SEQ, "api_seq_register")):
        with open(path, encoding="utf-8") as f:
            src = f.read()
        m = re.search(r"\bint\s+%s\s*\([^)]*\)\s*\{(.*?)\n\}" % fn, src, re.S)
        assert m, "%s not found in %s" % (fn, path)
        bodies.append(m.group(1))
    routes = []
    for entry in re.findall(r"\{([^{}]*\.path\s*=[^{}]*)\}", "\n".join(bodies)):
        path = re.search(r'\.path\s*=\s*"([^"]*)"', entry).group(1)
        prefix = re.search(r"\.prefix\s*=\s*true", entry) is not None
        routes.append((path, prefix))
    return routes


def normalise_spec_path(p):
    """'/id/{id}' -> ('/id/', True): a path whose first template segment follows a prefix is
    served by that prefix route ('/cache/{key}/incr' -> ('/cache/', True))."""
    m = re.match(r"^(.*?/)\{[^/{}]+\}(/.*)?$", p)
    return (m.group(1), True) if m else (p, False)


class OpenApiValid(unittest.TestCase):
    def test_document_validates_against_the_openapi_3_0_schema(self):
        valid, report = validate_document(SPEC)
        self.assertTrue(valid, "service/openapi.yaml is not valid OpenAPI 3.0:\n" + report)

    def test_validator_rejects_what_it_should(self):
        """The judge is awake: a description cut by an unquoted comma in a flow mapping (the
        mistake it found here) and a dangling $ref are findings."""
        with open(SPEC, encoding="utf-8") as f:
            text = f.read()
        good = "timestamp_ms: {type: integer, description: 'unix_ts_ms, milliseconds"
        self.assertIn(good, text)
        bad = {"unquoted comma": text.replace(good, good.replace("'", "")).replace(
                   "the Unix epoch.'}", "the Unix epoch.}", 1),
               "dangling $ref": text.replace("'#/components/schemas/ParsedUuid'",
                                             "'#/components/schemas/NoSuchSchema'")}
        for what, doc in bad.items():
            with self.subTest(what=what), tempfile.NamedTemporaryFile(
                    "w", suffix=".yaml", encoding="utf-8") as f:
                self.assertNotEqual(doc, text)
                f.write(doc)
                f.flush()
                valid, report = validate_document(f.name)
                self.assertFalse(valid, report)


class OpenApiInSync(unittest.TestCase):
    def test_files_found(self):
        self.assertTrue(os.path.isfile(SPEC), SPEC)
        self.assertTrue(os.path.isfile(ADMIN), ADMIN)

    def test_spec_header(self):
        with open(SPEC, encoding="utf-8") as f:
            text = f.read()
        self.assertNotIn("\t", text, "YAML must not contain tabs")
        self.assertRegex(text, r"(?m)^openapi: 3\.0\.\d+$")

    def test_paths_equal_registered_routes(self):
        routes = registered_routes()
        self.assertTrue(routes, "no routes parsed from api_register")
        self.assertEqual(len(routes), len(set(routes)), "duplicate route in api_register")
        spec = spec_paths()
        self.assertTrue(spec, "no paths parsed from openapi.yaml")
        self.assertEqual({normalise_spec_path(p) for p in spec}, set(routes))

    def test_prefix_route_is_id_template(self):
        self.assertIn(("/id/", True), registered_routes())
        self.assertIn("/id/{id}", spec_paths())

    def test_get_implies_head(self):
        # The server answers HEAD wherever it answers GET.
        for path, ops in spec_paths().items():
            with self.subTest(path=path):
                self.assertTrue(ops, "no operations")
                if "get" in ops:
                    self.assertIn("head", ops)


if __name__ == "__main__":
    unittest.main()
