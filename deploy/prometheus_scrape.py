"""A real Prometheus (Debian's `prometheus` package) scraping the replicas of test_replicas.py,
and the questions an operator would ask it through its HTTP API.

test_replicas.py starts `Prometheus` once the network namespaces exist, loads the replicas with
sfload at a fixed rate for about 12 s (`MonitoredLoad`), and asks, while the load runs and after
it: are all targets up, is the ID rate Prometheus computes the rate sfload measured, are the latency
quantiles of the request histogram sane, is every replica ready, does the counter total equal the
IDs sfload received, and — when deploy/monitoring/snowflaked.rules.yml exists — did every rule
load healthy and is no alert firing. Every answer is printed as a "FIGURE name: value" line.

Prometheus listens on 127.0.0.1 on a free port and keeps its TSDB in the test's temp dir; stop()
ends it (SIGTERM, then SIGKILL) and the caller removes the directory. With tls_ca (the replicas
serve HTTPS, as with deploy/k8s/components/tls) it scrapes https:// and verifies the replicas'
certificates against that CA; MonitoredLoad and ids_issued_before() speak HTTPS the same way.
"""
import json
import math
import os
import re
import subprocess
import sys
import time
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "test", "fault"))

from faultutil import ensure_programs, figure, free_port  # noqa: E402

RULES = os.path.join(HERE, "monitoring", "snowflaked.rules.yml")
JOB = "snowflaked"
SCRAPE_INTERVAL_S = 1
# rate() needs two samples in its window and should have a few: 5 s holds about five scrapes at
# 1 s, so one late or missed scrape on this loaded machine still leaves three or four.
RATE_WINDOW = "5s"
# Monitored load: open loop (a fixed request rate), so the true ID rate is constant and the rate
# Prometheus computes over any 5 s inside the run should equal sfload's average. -n ends it
# (-t only bounds it): every request sent is answered, so the daemons' counters must equal the IDs
# sfload received exactly.
LOAD_RATE = 3000          # requests/s over the three replicas
LOAD_REQUESTS = 36000     # 12 s at LOAD_RATE
LOAD_IDS_PER_REQUEST = 100
QUERY_AT_S = 9.0          # mid-load queries: the [5s] window lies within seconds 4..9 of 12
# Prometheus' rate vs sfload's: the load is constant, so what separates the two is the scrape
# timing (a sample's timestamp is the scrape's start, the counter is read a little later; a late
# scrape on a loaded 2-core machine is tens of ms in a 4-5 s span) and rate()'s extrapolation to
# the window's edges, each a few percent. +-30 % covers that with room and still fails if one of
# the three replicas went unscraped (2/3 = -33 %) or the metric counted requests, not IDs (x100).
RATE_TOLERANCE = 0.30
LATENCY_BOUND_S = 1.0     # the daemon answers /ids in well under a millisecond; 1 s is "broken"


class Prometheus:
    """One prometheus process scraping `targets` ([(pod, "addr:port")]) every second."""

    def __init__(self, work, targets, tls_ca=None):
        why = ensure_programs({"prometheus": "prometheus"})
        if why:
            raise AssertionError("prometheus: " + why)
        self.dir = os.path.join(work, "prometheus")
        os.makedirs(self.dir)
        self.rules = RULES if os.path.exists(RULES) else None
        self.config = os.path.join(self.dir, "prometheus.yml")
        with open(self.config, "w") as f:
            f.write(self.config_text(targets, self.rules, tls_ca))
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.log_path = os.path.join(self.dir, "prometheus.log")
        self.log = open(self.log_path, "w")
        # The Debian defaults for --web.console.* and --web.local-assets are fine: the API does
        # not use them.
        self.started = time.time()
        self.proc = subprocess.Popen(
            ["prometheus", "--config.file=" + self.config,
             "--storage.tsdb.path=" + os.path.join(self.dir, "tsdb"),
             "--web.listen-address=127.0.0.1:%d" % self.port, "--log.level=warn"],
            stdout=self.log, stderr=subprocess.STDOUT)

    @staticmethod
    def config_text(targets, rules, tls_ca=None):
        lines = ["global:",
                 "  scrape_interval: %ds" % SCRAPE_INTERVAL_S,
                 "  scrape_timeout: %ds" % SCRAPE_INTERVAL_S,
                 "  evaluation_interval: %ds" % SCRAPE_INTERVAL_S]
        if rules:
            lines += ["rule_files:", "  - %s" % json.dumps(rules)]
        lines += ["scrape_configs:",
                  "  - job_name: %s" % JOB,
                  "    metrics_path: /metrics"]
        if tls_ca:  # the targets' certificates carry their addresses as IP SANs
            lines += ["    scheme: https",
                      "    tls_config:",
                      "      ca_file: %s" % json.dumps(tls_ca)]
        lines += ["    static_configs:"]
        for pod, target in targets:
            lines += ["      - targets: [%s]" % json.dumps(target),
                      "        labels: {pod: %s}" % json.dumps(pod)]
        return "\n".join(lines) + "\n"

    def log_tail(self, n=20):
        with open(self.log_path, errors="replace") as f:
            return "".join(f.readlines()[-n:])

    def get(self, path, **params):
        url = self.url + path + ("?" + urllib.parse.urlencode(params) if params else "")
        with urllib.request.urlopen(url, timeout=5) as r:
            body = json.load(r)
        if body.get("status") != "success":
            raise AssertionError("%s: %s" % (path, body))
        return body["data"]

    def wait_ready(self, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError("prometheus exited %d at start:\n%s" % (
                    self.proc.returncode, self.log_tail()))
            try:
                with urllib.request.urlopen(self.url + "/-/ready", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        raise AssertionError("prometheus not ready in %d s:\n%s" % (timeout, self.log_tail()))

    def query(self, expr):
        """Instant query: [(labels, float value)]."""
        data = self.get("/api/v1/query", query=expr)
        if data["resultType"] == "scalar":
            return [({}, float(data["result"][1]))]
        return [(s["metric"], float(s["value"][1])) for s in data["result"]]

    def targets(self):
        return [t for t in self.get("/api/v1/targets", state="active")["activeTargets"]
                if t["labels"].get("job") == JOB]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


class ScrapeChecks:
    """The questions, each failure appended to `failures` (the caller's list)."""

    def __init__(self, prom, pods, failures):
        self.prom, self.pods, self.failures = prom, sorted(pods), failures

    def fail(self, text):
        self.failures.append("prometheus: " + text)

    def wait_targets_up(self, timeout=15):
        """Every target scraped successfully at least once (the first scrape of a target comes
        within one interval of Prometheus learning it, at an offset of its own)."""
        deadline = time.time() + timeout
        while True:
            targets = self.prom.targets()
            if len(targets) == len(self.pods) and all(t["health"] == "up" for t in targets):
                return
            if time.time() > deadline:
                self.fail("targets not all up in %d s: %s" % (timeout, [
                    (t["labels"].get("pod"), t["health"], t["lastError"]) for t in targets]))
                return
            time.sleep(0.2)

    def targets_up(self, when):
        targets = self.prom.targets()
        for t in sorted(targets, key=lambda t: t["labels"].get("pod", "")):
            figure("prometheus %s target %s %s" % (when, t["labels"].get("pod"), t["scrapeUrl"]),
                   "health %s, last scrape %.4f s, lastError %r" % (
                       t["health"], t["lastScrapeDuration"], t["lastError"]))
        pods = sorted(t["labels"].get("pod") for t in targets if t["health"] == "up")
        if pods != self.pods:
            self.fail("%s: targets up %s, expected %s" % (when, pods, self.pods))
        up = {m.get("pod"): v for m, v in self.prom.query('up{job="%s"}' % JOB)}
        figure("prometheus %s up{job=\"%s\"}" % (when, JOB), fmt_by_pod(up))
        if up != {p: 1.0 for p in self.pods}:
            self.fail("%s: up{job=\"%s\"} is %s, expected 1 for each of %s" % (
                when, JOB, up, self.pods))

    def ready(self, when):
        ready = {m.get("pod"): v for m, v in self.prom.query('snowflaked_ready{job="%s"}' % JOB)}
        figure("prometheus %s snowflaked_ready" % when, fmt_by_pod(ready))
        if ready != {p: 1.0 for p in self.pods}:
            self.fail("%s: snowflaked_ready is %s, expected 1 for each of %s" % (
                when, ready, self.pods))

    def during_load(self):
        """Mid-load questions; returns Prometheus' ID rate for compare_rate()."""
        self.targets_up("during load")
        self.ready("during load")
        expr = 'rate(snowflaked_ids_issued_total{job="%s"}[%s])' % (JOB, RATE_WINDOW)
        per_pod = {m.get("pod"): v for m, v in self.prom.query(expr)}
        total = self.prom.query("sum(%s)" % expr)
        rate = total[0][1] if total else float("nan")
        figure("prometheus sum(%s)" % expr, "%.0f IDs/s" % rate)
        figure("prometheus %s by pod" % expr, fmt_by_pod(per_pod, "%.0f"))
        idle = [p for p in self.pods if not per_pod.get(p, 0) > 0]
        if idle:
            self.fail("no ID rate for %s during load: %s" % (idle, per_pod))
        quantiles = {}
        for q in (0.5, 0.99):
            expr = ('histogram_quantile(%s, sum by (le) (rate('
                    'snowflaked_http_request_duration_seconds_bucket{job="%s"}[%s])))'
                    % (q, JOB, RATE_WINDOW))
            res = self.prom.query(expr)
            quantiles[q] = res[0][1] if len(res) == 1 else float("nan")
            figure("prometheus " + expr, "%.3g s" % quantiles[q])
            if not (math.isfinite(quantiles[q]) and 0 < quantiles[q] < LATENCY_BOUND_S):
                self.fail("latency quantile %s is %r, expected finite, > 0 and < %g s" % (
                    q, quantiles[q], LATENCY_BOUND_S))
        if not quantiles[0.5] <= quantiles[0.99]:
            self.fail("p50 %r > p99 %r" % (quantiles[0.5], quantiles[0.99]))
        # How much the quantiles can say: histogram_quantile() interpolates linearly inside a
        # bucket, so requests all in the lowest bucket give p50 = half its bound.
        lowest = self.prom.query(
            'sum(rate(snowflaked_http_request_duration_seconds_bucket{job="%s",le="5e-05"}[%s]))'
            ' / sum(rate(snowflaked_http_request_duration_seconds_count{job="%s"}[%s]))'
            % (JOB, RATE_WINDOW, JOB, RATE_WINDOW))
        if lowest:
            figure("prometheus share of requests in the lowest latency bucket (<= 50 us)",
                   "%.4f" % lowest[0][1])
        return rate

    def compare_rate(self, prom_rate, sfload_rate):
        ratio = prom_rate / sfload_rate if sfload_rate > 0 else float("nan")
        figure("prometheus ID rate / sfload ID rate", "%.0f / %.0f = %.3f (allowed %.2f..%.2f)" % (
            prom_rate, sfload_rate, ratio, 1 - RATE_TOLERANCE, 1 + RATE_TOLERANCE))
        if not abs(ratio - 1) <= RATE_TOLERANCE:
            self.fail("ID rate %.0f/s differs from sfload's %.0f/s by more than %d %%" % (
                prom_rate, sfload_rate, RATE_TOLERANCE * 100))

    def after_load(self, expected_ids, timeout=5):
        """The counters, scraped after the load ended, add up to every ID issued
        (expected_ids: ids_issued_before() plus the IDs the clients received)."""
        expr = 'sum(snowflaked_ids_issued_total{job="%s"})' % JOB
        deadline = time.time() + timeout
        while True:
            res = self.prom.query(expr)
            seen = int(res[0][1]) if res else None
            if seen == expected_ids or time.time() > deadline:
                break
            time.sleep(0.25)
        figure("prometheus after load " + expr, "%s (expected: issued before the loads + IDs "
               "sfload received = %d)" % (seen, expected_ids))
        if seen != expected_ids:
            self.fail("%s is %s after the load, expected %d" % (expr, seen, expected_ids))
        self.targets_up("after load")
        self.ready("after load")

    def rules_and_alerts(self, timeout=10):
        """With the rules file: every rule evaluated healthy, and no alert firing or pending
        (pending means the alert's expression holds now: a healthy deployment must be silent).
        A group is first evaluated within one of its intervals after Prometheus starts (the
        global evaluation_interval is 1 s; a group may set a longer one): rules of a group whose
        interval is longer than Prometheus has been running may still be unevaluated ("unknown")
        and are reported, not failed."""
        if not self.prom.rules:
            print("prometheus: %s absent, rule and alert checks skipped" %
                  os.path.relpath(RULES, os.path.join(HERE, "..")))
            return
        deadline = time.time() + timeout
        while True:
            groups = self.prom.get("/api/v1/rules")["groups"]
            unevaluated = [g["interval"] for g in groups for r in g["rules"]
                           if r["health"] == "unknown"]
            age_at_deadline = deadline - self.prom.started
            if not unevaluated or all(i > age_at_deadline for i in unevaluated):
                break
            if time.time() > deadline:
                break
            time.sleep(0.5)
        age = time.time() - self.prom.started
        rules = [(g, r) for g in groups for r in g["rules"]]
        figure("prometheus rules", "%d groups, %d rules, health %s, after %.0f s" % (
            len(groups), len(rules), sorted({r["health"] for _, r in rules}), age))
        if not rules:
            self.fail("%s loaded no rule" % RULES)
        for g, r in rules:
            if r["health"] == "unknown" and g["interval"] > age - 1:
                print("prometheus: rule %s/%s not evaluated yet (group interval %g s, "
                      "Prometheus up %.0f s)" % (g["name"], r["name"], g["interval"], age))
            elif r["health"] != "ok":
                self.fail("rule %s/%s health %s: %s" % (g["name"], r["name"], r["health"],
                                                        r.get("lastError", "")))
        alerts = self.prom.get("/api/v1/alerts")["alerts"]
        figure("prometheus alerts after load", "%d (%s)" % (len(alerts), ", ".join(
            "%s %s" % (a["labels"].get("alertname"), a["state"]) for a in alerts) or "none"))
        for a in alerts:
            self.fail("alert %s is %s on a healthy deployment: %s" % (
                a["labels"].get("alertname"), a["state"], a["labels"]))


class MonitoredLoad:
    """sfload at LOAD_RATE requests/s of /ids?count=100 over every replica at once."""

    def __init__(self, sfload, addrs, cacert=None):
        self.started = time.time()
        scheme = "https" if cacert else "http"
        self.proc = subprocess.Popen(
            [sfload, "--allow-remote", "-q", "--json", "--verify-ids", "-c", "6", "-T", "1",
             "-R", str(LOAD_RATE), "-n", str(LOAD_REQUESTS), "-t", "40"] +
            (["--cacert", cacert] if cacert else []) +
            ["%s://%s/ids?count=%d" % (scheme, a, LOAD_IDS_PER_REQUEST) for a in addrs],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def sleep_until(self, seconds_in):
        time.sleep(max(0.0, self.started + seconds_in - time.time()))

    def finish(self, failures):
        """Waits for sfload; returns (IDs received, IDs/s) and appends its failures."""
        try:
            out, err = self.proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
        try:
            r = json.loads(out)
        except ValueError:
            failures.append("monitored sfload exited %s without JSON: %s" % (
                self.proc.returncode, err))
            return 0, 0.0
        ids = r["verify"]["ids"]
        rate = ids / r["duration_s"]
        figure("sfload monitored load", "%d requests in %.2f s, %d IDs, %.0f IDs/s, "
               "latency p50 %.0f us p99 %.0f us, per target %s" % (
                   r["responses"], r["duration_s"], ids, rate, r["latency_us"]["p50"],
                   r["latency_us"]["p99"], [t["ids"] for t in r["targets"]]))
        if self.proc.returncode != 0 or not r["passed"]:
            failures.append("monitored sfload failed (exit %s): %s" % (self.proc.returncode, err))
        return ids, rate

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def ids_issued_before(targets, tls=None):
    """sum of snowflaked_ids_issued_total read from the replicas themselves ("addr:port" each;
    over HTTPS with tls, an ssl.SSLContext). Not 0 after start: each replica asks its
    snowflake.peers for GET /id while it starts."""
    total = 0
    for target in targets:
        url = "%s://%s/metrics" % ("https" if tls else "http", target)
        with urllib.request.urlopen(url, timeout=5, context=tls) as r:
            text = r.read().decode()
        total += int(re.search(r"^snowflaked_ids_issued_total (\d+)$", text, re.M).group(1))
    return total


def fmt_by_pod(values, fmt="%g"):
    return ", ".join("%s=%s" % (p, fmt % v) for p, v in sorted(values.items(), key=str)) or "none"
