"""docs/metrics.md lists exactly the metric families the daemon exports, with their types and
labels.

The exported families are the union of two live expositions (exposition.py): a daemon with its
HTTP, memcached and echo listeners that has served every route and protocol (static identity),
and the same with its worker id claimed from a one-member etcd (the identity_* and etcd_*
families). The documented ones are the first column of docs/metrics.md's tables. A family
exported but not documented, or documented but never exported, fails; so does a type or a label
set that differs from the exposition's."""
import os
import re
import unittest

import exposition

DOC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "metrics.md")
ROW = re.compile(r"^\| `(snowflaked_[a-z0-9_]+)` \| (\w+) \|([^|]*)\|", re.M)
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^}]*)\})? ", re.M)


def documented(text):
    """{family: (type, set of label names)} of docs/metrics.md's table rows."""
    out = {}
    for name, kind, labels in ROW.findall(text):
        if name in out:
            raise AssertionError("docs/metrics.md lists %s twice" % name)
        out[name] = (kind, set(re.findall(r"`([a-z_]+)`", labels)))
    return out


def exported(text):
    """{family: (type, set of label names)} of an exposition (le and quantile left out)."""
    types, _ = exposition.metric_names(text)
    out = {name: (kind, set()) for name, kind in types.items()}
    for sample, labels in SAMPLE.findall(text):
        family = sample if sample in types else re.sub(r"_(bucket|sum|count)$", "", sample)
        out[family][1].update(l for l in re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="', labels)
                              if l not in ("le", "quantile"))
    return out


class MetricsDocumented(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(DOC, encoding="utf-8") as f:
            cls.doc = documented(f.read())
        cls.live = {}
        for served in (exposition.exercised_server, exposition.exercised_etcd_server):
            with served() as (_, text):
                for name, (kind, labels) in exported(text).items():
                    cls.live.setdefault(name, (kind, set()))[1].update(labels)

    def test_every_exported_family_is_documented(self):
        missing = sorted(set(self.live) - set(self.doc))
        self.assertEqual(missing, [], "exported but not in docs/metrics.md")

    def test_every_documented_family_is_exported(self):
        stale = sorted(set(self.doc) - set(self.live))
        self.assertEqual(stale, [], "in docs/metrics.md but exported by neither daemon")

    def test_types_and_labels_match(self):
        for name in sorted(set(self.doc) & set(self.live)):
            with self.subTest(family=name):
                self.assertEqual(self.doc[name], self.live[name])

    def test_the_parsers_see_what_they_claim(self):
        """The check is awake: a family, a type and a label the other side lacks are seen."""
        text = ("# HELP snowflaked_x_total x\n# TYPE snowflaked_x_total counter\n"
                'snowflaked_x_total{kind="a"} 1\n# HELP snowflaked_h h\n'
                "# TYPE snowflaked_h histogram\n"
                'snowflaked_h_bucket{route="/",le="+Inf"} 1\nsnowflaked_h_sum{route="/"} 1\n'
                'snowflaked_h_count{route="/"} 1\n')
        self.assertEqual(exported(text), {"snowflaked_x_total": ("counter", {"kind"}),
                                          "snowflaked_h": ("histogram", {"route"})})
        self.assertEqual(documented("| `snowflaked_x_total` | counter | `kind` | x |\n"
                                    "| `snowflaked_y` | gauge | | y |\n"),
                         {"snowflaked_x_total": ("counter", {"kind"}),
                          "snowflaked_y": ("gauge", set())})
        self.assertGreater(len(self.live), 60)


if __name__ == "__main__":
    unittest.main()
