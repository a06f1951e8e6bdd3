"""`snowflaked --check-config` output loads again with -c and prints the same (docs/configuration.md).

For several configurations (the defaults; many keys changed at once; a named layout; the etcd
identity; a token from the environment): `snowflaked ... --check-config > f` then
`snowflaked -c f --check-config` exits 0 and prints the same document, but for
resolved.source and resolved.worker_id_origin, which name the file. A token from a file layer is
printed as "***" and never in clear; loaded again without the real one, the start stops (exit 2)
with a message that says how to give it. --print-schema's defaults are what --check-config
prints for the defaults."""
import json
import os
import subprocess
import tempfile
import unittest

BINARY = os.environ.get("SNOWFLAKED_BIN", "")
TOKEN = "s3cret-token-0123456789"
NAMED = ("source", "worker_id_origin")


def run(*args, env=None):
    full = {"PATH": os.environ.get("PATH", "")}
    full.update(env or {})
    p = subprocess.run([BINARY, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       env=full, timeout=30)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def comparable(text):
    doc = json.loads(text)
    for k in NAMED:
        doc["resolved"].pop(k)
    return doc


class CheckConfigRoundTrip(unittest.TestCase):
    def setUp(self):
        if not BINARY:
            self.skipTest("SNOWFLAKED_BIN not set")
        self.dir = tempfile.TemporaryDirectory(prefix="sf_cc_")
        self.addCleanup(self.dir.cleanup)

    def round_trip(self, *args, env=None, reload_env=None):
        rc, first, err = run(*args, "--check-config", env=env)
        self.assertEqual(rc, 0, err)
        path = os.path.join(self.dir.name, "printed.json")
        with open(path, "w") as f:
            f.write(first)
        rc, second, err = run("-c", path, "--check-config",
                              env=env if reload_env is None else reload_env)
        self.assertEqual(rc, 0, "the printed configuration does not load again: %s\n%s"
                         % (err, first))
        self.assertEqual(comparable(second), comparable(first))
        self.assertEqual(json.loads(second)["resolved"]["source"], path)
        # the text itself, line for line, but for the lines naming the file
        strip = lambda t: [l for l in t.splitlines() if not any('"%s"' % k in l for k in NAMED)]
        self.assertEqual(strip(second), strip(first))
        return json.loads(first)

    def test_defaults(self):
        self.round_trip()

    def test_many_keys_changed(self):
        doc = self.round_trip(*[a for kv in (
            "server.port=9191", "server.host=::1", "server.threads=3", "server.max_body_bytes=4096",
            "server.tcp_nodelay=false", "snowflake.epoch=2021-06-01T12:00:00.250Z",
            "snowflake.worker_bits=6", "snowflake.datacenter_bits=4", "snowflake.worker_id=env:W",
            "snowflake.sync=mutex", "snowflake.default_encoding=base62",
            "snowflake.peers=127.0.0.1:1,127.0.0.1:2", "cache.memcached_port=11311",
            "cache.snapshot_path=/tmp/x \"quoted\" \\ path", "echo.tcp_port=7007",
            "log.level=debug", "log.format=json", "auth.protect_reads=true",
            "auth.token_file=/run/secrets/token") for a in ("--set", kv)], env={"W": "7"})
        self.assertEqual(doc["server"]["host"], "::1")
        self.assertEqual(doc["snowflake"]["worker_id"], "env:W")
        self.assertEqual(doc["resolved"]["worker_id"], 7)

    def test_named_layout(self):
        doc = self.round_trip("--set", "snowflake.layout=sonyflake")
        self.assertEqual(doc["resolved"]["layout_name"], "sonyflake")

    def test_etcd_identity(self):
        doc = self.round_trip("--set", "snowflake.worker_id=etcd", "--set",
                              "snowflake.etcd.endpoints=http://127.0.0.1:2379")
        self.assertIsNone(doc["resolved"]["worker_id"])
        self.assertEqual(doc["snowflake"]["etcd"]["worker_max"], 31)  # "max", resolved

    def test_token_from_the_environment(self):
        env = {"SNOWFLAKED_AUTH_TOKEN": TOKEN}
        doc = self.round_trip(env=env)
        self.assertEqual(doc["auth"]["token"], "***")

    def test_token_from_a_file_is_hidden_and_must_be_given_again(self):
        src = os.path.join(self.dir.name, "in.json")
        with open(src, "w") as f:
            json.dump({"auth": {"token": TOKEN}}, f)
        rc, first, err = run("-c", src, "--check-config")
        self.assertEqual(rc, 0, err)
        self.assertNotIn(TOKEN, first)
        self.assertEqual(json.loads(first)["auth"]["token"], "***")
        path = os.path.join(self.dir.name, "printed.json")
        with open(path, "w") as f:
            f.write(first)
        rc, out, err = run("-c", path, "--check-config")
        self.assertEqual(rc, 2, out)
        self.assertIn('%s: auth.token: "***" is the token --check-config hides: give the real one'
                      % path, err)
        self.assertIn("SNOWFLAKED_AUTH_TOKEN", err)
        # given again from the environment, or an explicit "" (no access control), it loads
        rc, second, err = run("-c", path, "--check-config", env={"SNOWFLAKED_AUTH_TOKEN": TOKEN})
        self.assertEqual(rc, 0, err)
        self.assertEqual(comparable(second), comparable(first))
        rc, _, err = run("-c", path, "--set", "auth.token=", "--check-config")
        self.assertEqual(rc, 0, err)

    def test_resolved_must_be_an_object(self):
        path = os.path.join(self.dir.name, "bad.json")
        with open(path, "w") as f:
            f.write('{"resolved": 5}')
        rc, _, err = run("-c", path, "--check-config")
        self.assertEqual(rc, 2)
        self.assertIn("%s: resolved: must be an object" % path, err)
        with open(path, "w") as f:  # only at the top level, and only in a file
            f.write('{"server": {"resolved": {}}}')
        self.assertEqual(run("-c", path, "--check-config")[0], 2)

    def test_print_schema_defaults_are_the_check_config_defaults(self):
        rc, out, err = run("--print-schema")
        self.assertEqual(rc, 0, err)
        rc, printed, err = run("--check-config")
        self.assertEqual(rc, 0, err)
        doc = json.loads(printed)
        for k in json.loads(out):
            if k["key"] == "server.threads":  # printed resolved: the CPU count
                continue
            node = doc
            for part in k["key"].split("."):
                node = node[part]
            with self.subTest(key=k["key"]):
                self.assertEqual(node, k["default"])


if __name__ == "__main__":
    unittest.main()
