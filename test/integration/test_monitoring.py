"""deploy/monitoring checked against Prometheus' own tools and the real daemon (issue 15).

- `promtool check rules` and `promtool test rules` (Debian's prometheus package, installed at
  test time when missing) on snowflaked.rules.yml and its unit tests, and every alert has a
  case where it fires (labels and annotations expected) and one where it must stay silent;
- every metric name the rules and the Grafana dashboard query is one a live daemon exports after
  serving every route and protocol (exposition.py), static identity and etcd identity (a
  one-member etcd on loopback) — histogram/summary series by their family — and every label
  matcher names a label those series carry (an equality matcher, such as the SLO's le="0.025",
  a value they carry); recording-rule names must be defined in the rules file;
- the dashboard is well-formed: unique panel ids, the ${DS_PROMETHEUS} data source and the
  job/instance variables on every query, and every query is valid PromQL to promtool;
- the Kubernetes PrometheusRule is up to date with the rules file (gen_prometheusrule.py).
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

import sfharness

yaml = sfharness.debian_import("yaml", "python3-yaml")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MON = os.path.join(ROOT, "deploy", "monitoring")
RULES = os.path.join(MON, "snowflaked.rules.yml")
RULE_TESTS = os.path.join(MON, "snowflaked.rules.test.yml")
DASHBOARD = os.path.join(MON, "grafana-dashboard.json")

import exposition  # noqa: E402

# Labels Prometheus adds to every scraped series (target labels), not the daemon.
TARGET_LABELS = {"job", "instance"}
STRING_RE = re.compile(r'"(?:[^"\\]|\\.)*"')
IDENT_RE = re.compile(r"(?<![\w:.])([a-zA-Z_:][a-zA-Z0-9_:]*)")
SELECTOR_RE = re.compile(r"\b(snowflaked_[a-zA-Z0-9_]+)\s*\{([^}]*)\}")
MATCHER_RE = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*("(?:[^"\\]|\\.)*")\s*,?')


def load_rules():
    with open(RULES) as f:
        return yaml.safe_load(f)["groups"]


def load_dashboard():
    with open(DASHBOARD) as f:
        return json.load(f)


def all_panels(dash):
    for p in dash["panels"]:
        yield p
        yield from p.get("panels", [])  # a collapsed row keeps its panels inside


def dashboard_exprs(dash):
    return [(p, t) for p in all_panels(dash) for t in p.get("targets", [])]


def names_in(expr):
    """Metric and recording-rule names an expression uses (roughly: identifiers outside
    strings, after label matchers and durations are gone, that are not PromQL words)."""
    bare = STRING_RE.sub('""', expr)
    bare = re.sub(r"\[[^\]]*\]", "", bare)                   # [5m], [$__rate_interval]
    bare = re.sub(r"\{[^}]*\}", "", bare)                    # label matchers
    bare = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", bare)
    return {n for n in IDENT_RE.findall(bare) if n.startswith("snowflaked_") or ":" in n}


class Exposition:
    """Family types and, per sample name, the label names and values seen, from both the static
    and the etcd-identity daemons (computed once)."""
    types = None
    labels = None

    @classmethod
    def collect(cls):
        if cls.types is not None:
            return
        texts = []
        with exposition.exercised_server() as (_, text):
            texts.append(text)
        with exposition.exercised_etcd_server() as (_, text):
            texts.append(text)
        cls.types, cls.labels = {}, {}
        for text in texts:
            families, _ = exposition.metric_names(text)
            cls.types.update(families)
            for name, labelset in re.findall(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^}]*)\})? ",
                                             text, re.M):
                seen = cls.labels.setdefault(name, {})
                for k, v in re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"',
                                       labelset or ""):
                    seen.setdefault(k, set()).add(v)

    @classmethod
    def exports(cls, name):
        """True when name is a sample or family the daemon prints."""
        if name in cls.labels or name in cls.types:
            return True
        family = re.sub(r"_(bucket|sum|count)$", "", name)
        return cls.types.get(family) in ("histogram", "summary") and name in cls.labels


class Rules(unittest.TestCase):
    def test_promtool_check_rules(self):
        r = subprocess.run([exposition.promtool(), "check", "rules", RULES], capture_output=True, text=True,
                           timeout=60)
        out = (r.stdout + r.stderr).strip()
        print("promtool check rules:", " ".join(out.split()), flush=True)
        self.assertEqual(r.returncode, 0, out)
        self.assertRegex(out, r"SUCCESS: \d+ rules found")

    def test_promtool_test_rules(self):
        r = subprocess.run([exposition.promtool(), "test", "rules", RULE_TESTS], capture_output=True,
                           text=True, timeout=120, cwd=MON)
        out = (r.stdout + r.stderr).strip()
        print("promtool test rules:", " ".join(out.split()), flush=True)
        self.assertEqual(r.returncode, 0, out)
        self.assertIn("SUCCESS", out)

    def test_every_alert_is_complete_and_has_a_firing_and_a_silent_case(self):
        alerts = [r for g in load_rules() for r in g["rules"] if "alert" in r]
        self.assertGreaterEqual(len(alerts), 20)
        with open(RULE_TESTS) as f:
            cases = [c for t in yaml.safe_load(f)["tests"] for c in t.get("alert_rule_test", [])]
        for a in alerts:
            name = a["alert"]
            with self.subTest(alert=name):
                self.assertIn("for", a)
                self.assertIn(a.get("labels", {}).get("severity"), ("critical", "warning"))
                self.assertLessEqual({"summary", "description", "runbook"},
                                     set(a.get("annotations", {})))
                mine = [c for c in cases if c["alertname"] == name]
                firing = [c for c in mine if c.get("exp_alerts")]
                self.assertTrue(firing, "no case where it fires")
                for c in firing:
                    for e in c["exp_alerts"]:
                        self.assertEqual(e["exp_labels"].get("severity"),
                                         a["labels"]["severity"])
                        self.assertLessEqual({"summary", "description", "runbook"},
                                             set(e.get("exp_annotations", {})))
                self.assertTrue([c for c in mine if not c.get("exp_alerts")],
                                "no case where it stays silent")

    def test_prometheusrule_is_generated_from_the_rules(self):
        r = subprocess.run([sys.executable, os.path.join(MON, "gen_prometheusrule.py"),
                            "--check"], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)


class Names(unittest.TestCase):
    """Every name and label matcher of the rules and the dashboard exists in a live exposition."""

    @classmethod
    def setUpClass(cls):
        Exposition.collect()
        cls.recorded = {r["record"] for g in load_rules() for r in g["rules"] if "record" in r}

    def check_exprs(self, where, exprs):
        used = set()
        for label, expr in exprs:
            names = names_in(expr)
            used |= names
            for n in names:
                if ":" in n:
                    self.assertIn(n, self.recorded, "%s: %s is not a recording rule" % (label, n))
                else:
                    self.assertTrue(Exposition.exports(n), "%s: %s is not exported" % (label, n))
            for name, matchers in SELECTOR_RE.findall(expr):
                seen = Exposition.labels.get(name, {})
                for k, op, v in MATCHER_RE.findall(matchers):
                    if k in TARGET_LABELS:
                        continue
                    self.assertIn(k, seen, "%s: %s has no label %s" % (label, name, k))
                    if op == "=":
                        self.assertIn(json.loads(v), seen[k],
                                      "%s: %s{%s} never seen" % (label, name, k + op + v))
        print("%s: %d names, all exported or recorded" % (where, len(used)), flush=True)
        return used

    def test_rules_use_only_exported_names(self):
        exprs = [(r.get("alert") or r["record"], r["expr"]) for g in load_rules()
                 for r in g["rules"]]
        used = self.check_exprs("rules", exprs)
        self.assertGreaterEqual(len(used), 25)

    def test_dashboard_uses_only_exported_names(self):
        dash = load_dashboard()
        exprs = [("panel %d %r" % (p["id"], p["title"]), t["expr"])
                 for p, t in dashboard_exprs(dash)]
        exprs += [("variable " + v["name"], v["query"]["query"])
                  for v in dash["templating"]["list"] if v["type"] == "query"]
        used = self.check_exprs("dashboard", exprs)
        self.assertGreaterEqual(len(used), 40)

    def test_the_checks_catch_what_they_claim(self):
        with self.assertRaises(AssertionError):
            self.check_exprs("bad", [("x", "rate(snowflaked_no_such_metric_total[5m])")])
        with self.assertRaises(AssertionError):
            self.check_exprs("bad", [("x", 'snowflaked_http_requests_total{code="200"}')])
        with self.assertRaises(AssertionError):
            self.check_exprs("bad", [("x", 'snowflaked_http_request_duration_seconds_bucket'
                                           '{le="0.03"}')])
        with self.assertRaises(AssertionError):
            self.check_exprs("bad", [("x", "job:snowflaked_nothing:ratio_rate5m")])
        self.assertEqual(names_in('sum by (route) (rate(snowflaked_a_total{route="/x"}[5m]))'
                                  ' / on (job) job:snowflaked_b:ratio_rate1h'),
                         {"snowflaked_a_total", "job:snowflaked_b:ratio_rate1h"})


class Dashboard(unittest.TestCase):
    def test_structure(self):
        dash = load_dashboard()
        panels = list(all_panels(dash))
        ids = [p["id"] for p in panels]
        self.assertEqual(len(ids), len(set(ids)), "panel ids not unique")
        variables = {v["name"]: v for v in dash["templating"]["list"]}
        self.assertEqual(variables["DS_PROMETHEUS"]["type"], "datasource")
        self.assertEqual(variables["DS_PROMETHEUS"]["query"], "prometheus")
        for v in ("job", "instance"):
            self.assertEqual(variables[v]["type"], "query")
            self.assertEqual(variables[v]["datasource"]["uid"], "${DS_PROMETHEUS}")
        self.assertIn("$job", variables["instance"]["query"]["query"])
        for p in panels:
            g = p["gridPos"]
            self.assertLessEqual(g["x"] + g["w"], 24, p["title"])
            if p["type"] == "row":
                continue
            self.assertEqual(p["datasource"]["uid"], "${DS_PROMETHEUS}", p["title"])
            self.assertTrue(p["targets"], p["title"])
            for t in p["targets"]:
                self.assertEqual(t["datasource"]["uid"], "${DS_PROMETHEUS}", p["title"])
                # every series the panel shows is narrowed by the job (and instance) variables
                for name, matchers in SELECTOR_RE.findall(t["expr"]):
                    self.assertIn('job=~"$job"', matchers, (p["title"], name))
                    self.assertIn('instance=~"$instance"', matchers, (p["title"], name))
                for name in names_in(t["expr"]):
                    if ":" in name:
                        self.assertRegex(t["expr"], re.escape(name) + r'\{[^}]*job=~"\$job"',
                                         p["title"])

    def test_every_query_is_valid_promql(self):
        """promtool parses each query as a recording rule, with the variables filled in."""
        rules = []
        for p, t in dashboard_exprs(load_dashboard()):
            expr = (t["expr"].replace("$__rate_interval", "5m").replace("$job", ".+")
                    .replace("$instance", ".+"))
            self.assertNotIn("$", expr, p["title"])
            rules.append({"record": "dashboard:panel%d:%s" % (p["id"], t["refId"]),
                          "expr": expr})
        with tempfile.NamedTemporaryFile("w", suffix=".yml") as f:
            yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}, f)
            f.flush()
            r = subprocess.run([exposition.promtool(), "check", "rules", f.name], capture_output=True,
                               text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("SUCCESS: %d rules found" % len(rules), r.stdout)


if __name__ == "__main__":
    unittest.main()
