#!/usr/bin/env python3
"""Writes the Prometheus Operator's PrometheusRule from snowflaked.rules.yml.

    python3 deploy/monitoring/gen_prometheusrule.py           # (re)write the PrometheusRule
    python3 deploy/monitoring/gen_prometheusrule.py --check   # exit 1 if it is out of date

The rules live once, in deploy/monitoring/snowflaked.rules.yml (what a plain Prometheus loads
with rule_files:, and what promtool tests). The Kubernetes component
deploy/k8s/components/servicemonitor ships the same groups as a PrometheusRule; kustomize cannot
wrap a file into a custom resource's spec, so this script does, textually: the rules file from
its `groups:` line on, indented under `spec:`, comments included, behind a fixed header. The
output is byte-for-byte a function of the rules file, so --check (run by deploy/k8s/validate.sh)
catches any hand edit or a rules change without regeneration; check_manifest.py then compares
the rendered PrometheusRule's spec.groups with the rules file as data and runs promtool on them.
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
RULES = os.path.join(HERE, "snowflaked.rules.yml")
OUTPUT = os.path.join(ROOT, "deploy", "k8s", "components", "servicemonitor", "prometheusrule.yaml")

HEADER = """\
# GENERATED from deploy/monitoring/snowflaked.rules.yml by
# deploy/monitoring/gen_prometheusrule.py: do not edit; change the rules file and run the script
# (validate.sh fails while the two differ). What the alerts mean: deploy/monitoring/README.md.
# The Prometheus Operator picks it up when its ruleSelector matches these labels (many installs
# select on a label such as `release: <name>`; add it in the overlay with a patch).
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: snowflaked
  labels:
    app.kubernetes.io/name: snowflaked
    app.kubernetes.io/instance: snowflaked
    app.kubernetes.io/component: monitoring
    app.kubernetes.io/part-of: snowflaked
    app.kubernetes.io/managed-by: kustomize
spec:
"""


def render(rules_text):
    lines = rules_text.splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith("groups:")), None)
    if start is None:
        raise SystemExit("gen_prometheusrule: %s has no top-level 'groups:'" % RULES)
    body = ["  " + l if l.strip() else "" for l in lines[start:]]
    return HEADER + "\n".join(body) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true",
                    help="do not write; exit 1 when %s is not what the rules file gives"
                    % os.path.relpath(OUTPUT, ROOT))
    args = ap.parse_args()
    with open(RULES) as f:
        want = render(f.read())
    rel = os.path.relpath(OUTPUT, ROOT)
    if args.check:
        try:
            with open(OUTPUT) as f:
                have = f.read()
        except FileNotFoundError:
            have = None
        if have != want:
            print("gen_prometheusrule: %s is out of date with deploy/monitoring/"
                  "snowflaked.rules.yml: run python3 deploy/monitoring/gen_prometheusrule.py"
                  % rel, file=sys.stderr)
            return 1
        print("gen_prometheusrule: %s is up to date" % rel)
        return 0
    with open(OUTPUT, "w") as f:
        f.write(want)
    print("gen_prometheusrule: wrote %s" % rel)
    return 0


if __name__ == "__main__":
    sys.exit(main())
