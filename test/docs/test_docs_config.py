"""docs/configuration.md stays true to the schema table in service/src/config/config.c.

The reference table is rendered from `snowflaked --print-schema` (configuration.py): a key added,
removed or changed in the table (type, default, range, meaning) without `make docs` fails here.
The schema itself is held to the embedded default: every key of config.json is in it with the
same default, and every key has a meaning.

Run as ctest docs_config does: from test/docs, `python3 -m unittest -v test_docs_config` with
SNOWFLAKED_BIN set."""
import json
import os
import unittest

import configuration

BINARY = os.environ.get("SNOWFLAKED_BIN", "")


def flatten(obj, prefix=""):
    out = {}
    for k, v in obj.items():
        if isinstance(v, dict):
            out.update(flatten(v, prefix + k + "."))
        else:
            out[prefix + k] = v
    return out


class ConfigurationReference(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not BINARY:
            raise unittest.SkipTest("SNOWFLAKED_BIN not set")
        cls.keys = configuration.schema(BINARY)
        with open(configuration.DOC, encoding="utf-8") as f:
            cls.text = f.read()

    def test_committed_reference_is_the_generated_one(self):
        fresh = configuration.generated(BINARY, self.text)
        self.assertTrue(fresh == self.text,
                        "docs/configuration.md is stale: run `make docs` (or `python3 "
                        "test/docs/configuration.py build/snowflaked --write`) and commit it; "
                        "`python3 test/docs/configuration.py build/snowflaked` shows the diff")

    def test_every_key_of_config_json_is_in_the_schema_with_its_default(self):
        with open(os.path.join(configuration.ROOT, "config.json"), encoding="utf-8") as f:
            embedded = flatten(json.load(f))
        schema = {k["key"]: k["default"] for k in self.keys}
        self.assertEqual(sorted(schema), sorted(embedded))
        for key, default in embedded.items():
            with self.subTest(key=key):
                if key == "snowflake.epoch":  # printed normalised: ISO-8601 UTC
                    self.assertEqual(schema[key], "2020-01-01T00:00:00Z")
                else:
                    self.assertEqual(schema[key], default)

    def test_every_key_has_a_meaning_and_a_row(self):
        for k in self.keys:
            with self.subTest(key=k["key"]):
                self.assertGreater(len(k["doc"].strip()), 5)
                self.assertNotIn("\n", k["doc"])
                self.assertEqual(self.text.count("\n| `%s` |" % k["key"]), 1)

    def test_a_new_key_would_be_caught(self):
        """The check is awake: a key the table does not have, or a changed default, is a diff."""
        fresh = configuration.generated(BINARY, self.text)
        extra = dict(self.keys[2], key="server.new_key", doc="new")
        head, rest = self.text.split(configuration.BEGIN, 1)
        with_new = head + configuration.render(self.keys + [extra]) + \
            rest.split(configuration.END, 1)[1]
        self.assertNotEqual(with_new, fresh)
        changed = self.text.replace("| `server.port` | integer | `8080` |",
                                    "| `server.port` | integer | `8081` |")
        self.assertNotEqual(changed, self.text)
        self.assertNotEqual(configuration.generated(BINARY, changed), changed)


if __name__ == "__main__":
    unittest.main()
