#!/usr/bin/env python3
"""make chaos: a long randomized fault run of a snowflaked fleet on a real 3-member etcd
(issue 14, design-14 step 9). Not part of ctest (minutes to hours).

    python3 test/cluster/chaos.py --seconds 300 [--seed S]      (make chaos CHAOS_SECONDS=300)

Fleet (as the CI scenario test_etcd_identity.py): 3 etcd members (--heartbeat-interval 50
--election-timeout 500), N daemons (default 10) for 8 slots (worker_bits 3, datacenter 1),
wait_for_slot true, ttl_s 3, fence_margin_ms 500, request_timeout_ms 400, one loop each; ONE
sfload over every daemon port for the whole run (--tolerate-faults --verify-ids --ids-out-v2).

Events at random intervals from a seeded RNG (each printed with its time and the seed; the same
seed gives the same sequence of decisions, not the same timing): kill -9 a daemon (restarted on
the same port, fresh data_dir, 0.5..2 x TTL later), SIGSTOP a daemon for 0.5..2 x TTL, SIGTERM a
daemon (exit 0 expected; restarted later), kill or SIGSTOP an etcd member (back after 0.5..3 s),
a brief quorum loss (two members down for at most 2 x TTL), and sometimes two faults at once. At
most --max-down daemons are killed/frozen/stopping at once; at most one etcd member is down
except during a quorum loss.

Checked continuously (about once a second): every exit is the one its signal asks for (-9 after
SIGKILL, 0 after SIGTERM; any other exit, 75 included, fails: wait_for_slot is true), no
sanitizer report or assertion in any log, every running daemon answers /readyz and /metrics, and
a ready one has slots_held >= 1 and fenced 0. At the end: every fault healed, then within a
bounded time all 8 slots held by ready daemons and etcd owner keys, the others waiting; sfload
exit 0 with 0 duplicates / non-increasing / malformed; over all records: no duplicate, strictly
increasing per connection, and per (datacenter, worker) the runs of each holder in ID order follow
etcd's own order of owners (read back with a watch from revision 1), received in ID order, late
records only from frozen holders and at most their in-flight responses; a clean SIGTERM of
everything (exit 0, no sanitizer report). Exit 0 with a summary, 1 with the violation, the seed
and the run directory (logs of every daemon incarnation, the event log, the records) kept.

Secured etcd (issue 24): --etcd-tls runs the cluster with https clients, --client-cert-auth and
peer TLS (certificates made with openssl); --etcd-auth [jwt|simple] with `auth enable`, a root and
a user limited to read/write on PREFIX/ (RS256 JWT, --jwt-ttl seconds, default 3: the daemons
re-authenticate many times a run); both may be combined. The daemons get the client settings as
the ETCD_TLS_KEYS / ETCD_AUTH_KEYS below, their client certificate and password in kubelet-style
Secret directories (..data swaps). Extra events: cert_rotate (TLS: a new client key and
certificate of the same CA swapped in; nothing may fence), passwd (auth: the user's password
changed in etcd, not in the file; after JWT ttl + TTL + 2 s every daemon up throughout must be
fenced; then the file gets the new password and all must recover), revoke (auth: the role's
permission on the prefix revoked; after TTL + 2 s every daemon up throughout must be fenced;
then granted again). While passwd or revoke is on, daemon restarts wait and SIGTERM events are
skipped (a start then fails closed with exit 1, by design).
"""
import argparse
import base64
import collections
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from etcdcluster import EtcdAuth, EtcdCluster, b64, ensure_etcd, ensure_etcdctl  # noqa: E402
from fleet import BINARY, SFLOAD, Daemon, Load, etcd_sets, low_port  # noqa: E402
from idrecords import Layout, check_fleet, check_handoffs, read_records  # noqa: E402
from seqcheck import (Freeze, SeqInc, check_namespace, counter_history,  # noqa: E402
                      holder_by_time, lease_owner_fn, owner_leases, resumed_after, watch_events)

LAYOUT = "41/5/3/12"
LAY = Layout.parse(LAYOUT)
DC = 1
SLOTS = 8
TTL_S = 3
MARGIN_MS = 500
PREFIX = "/sfchaos"
HEAL_BUDGET_S = 30        # sfload runs this much past the chaos: heal, then steady load
QUORUM_LOSS_MAX_S = 2 * TTL_S
# The daemon's etcd client settings for a secured cluster (issue 24; the client side is being
# built on i24-e / i24-r: rename here if its keys are named otherwise).
ETCD_TLS_KEYS = {"ca": "snowflake.etcd.tls.ca_file", "cert": "snowflake.etcd.tls.cert_file",
                 "key": "snowflake.etcd.tls.key_file"}
ETCD_AUTH_KEYS = {"user": "snowflake.etcd.auth.username",
                  "password_file": "snowflake.etcd.auth.password_file"}
BAD_LOG = ("runtime error:", "Sanitizer", "Assertion", "assertion failed")
# --sequences: segment-mode namespaces on every daemon, one sfload each over every daemon
SEQ_NAMESPACES = [{"name": "s200", "block": 200}, {"name": "s50", "block": 50},
                  {"name": "sad", "adaptive": True, "block": 50, "block_min": 50,
                   "block_max": 800}]
SEQ_BLOCK_MAX = {"s200": 200, "s50": 50, "sad": 800}
SEQ_COUNT = 5             # numbers per /seqs request
SEQ_TIMEOUT_MS = 1000     # sfload's --timeout (Load's default)


class Violation(Exception):
    pass


class Incarnation:
    """One daemon process on one port."""

    def __init__(self, pos, gen, daemon, t_spawn):
        self.pos, self.gen, self.d = pos, gen, daemon
        self.name = "%s.%d" % (daemon.name, gen)
        self.pid = daemon.pid
        self.t_spawn, self.wall_spawn = t_spawn, time.time()
        self.t_end = None          # monotonic time its exit was seen
        self.expect = None         # the exit status our signal asks for
        self.exit = None
        self.freezes = 0
        self.stop_without_quorum = False  # etcd had no quorum while it was stopping
        self.log_pos = 0
        self.fenced_s = 0.0        # last seen snowflaked_identity_fenced_seconds_total
        self.auths = 0.0           # last seen etcd authentications that succeeded (--etcd-auth)
        self.token_refusals = 0.0  # last seen calls etcd refused for their token, then repeated
        self.freeze_log = []       # (monotonic, wall) of each SIGCONT, and the freeze's length
        self.seq_unknown = 0.0     # last seen snowflaked_seq_etcd_claims_total{result="unknown"}
        self.seq_recovered = 0.0   # ... {result="recovered"}
        self.seq_claims = 0.0      # ... {result="ok"}
        self.unresponsive_since = None
        self.log_copy = None

    def key(self):
        return self.name


class Chaos:
    def __init__(self, args):
        self.a = args
        self.seed = args.seed
        self.rng = random.Random(self.seed)
        self.dir = tempfile.mkdtemp(prefix="sf_chaos.")
        self.t0 = time.monotonic()
        self.events = collections.Counter()
        self.skipped = collections.Counter()
        self.pending = []          # (time, description, callable)
        self.incs = []             # every Incarnation, spawn order
        self.current = {}          # pos -> Incarnation (the latest on that port)
        self.state = {}            # pos -> "up" | "down" | "frozen" | "stopping"
        self.etcd_state = {}       # member -> "up" | "killed" | "stopped"
        self.quorum_lost_at = None
        self.quorum_lost_total = 0.0
        self.quorum_lost_max = 0.0
        self.unowned_since = {}    # worker -> monotonic time first seen without owner
        self.max_unowned = 0.0
        self.reclaim_watch = {}    # worker -> (time, pid, kind) of a fault on its holder
        self.reclaim_s = collections.defaultdict(list)  # kind -> [s to a new owner]
        self.last_owners = {}
        self.event_log = open(os.path.join(self.dir, "events.log"), "w")
        self.ec = None
        self.load = None
        self.ports = []
        self.injected = None
        self.last_poll = 0.0
        self.heal_s = None
        self.security = set()      # passwd / revoke windows in progress (restarts wait)
        self.passwords = []        # every password the etcd user had this run
        self.security_fenced = collections.Counter()  # event -> daemons seen fenced by it
        self.seq_loads = {}        # --sequences: namespace -> Load
        self.seq_refused = 0       # /seq answers checked late in long quorum losses (all 503)

    # -- output ---------------------------------------------------------------------------------
    def say(self, text):
        line = "[+%8.3fs %s seed=%d] %s" % (time.monotonic() - self.t0,
                                             time.strftime("%H:%M:%S", time.gmtime()),
                                             self.seed, text)
        print(line, flush=True)
        self.event_log.write(line + "\n")
        self.event_log.flush()

    def fail(self, text):
        raise Violation(text)

    # -- fleet ----------------------------------------------------------------------------------
    def sets(self):
        return ["snowflake.worker_bits=3", "snowflake.datacenter_id=%d" % DC] + etcd_sets(
            self.ec.endpoints(), PREFIX, TTL_S, MARGIN_MS) + self.security_sets() + (
            ["sequences.namespaces=" + json.dumps(SEQ_NAMESPACES),
             "sequences.adaptive_block_ms=4000"] if self.a.sequences else [])

    def security_sets(self):
        """The client settings of a secured cluster; none on a plain one."""
        out = []
        if self.ec.tls:
            out += ["%s=%s" % (ETCD_TLS_KEYS["ca"], self.ec.tls.ca),
                    "%s=%s" % (ETCD_TLS_KEYS["cert"], self.ec.tls.client_cert),
                    "%s=%s" % (ETCD_TLS_KEYS["key"], self.ec.tls.client_key)]
        if self.ec.auth is not None:
            out += ["%s=%s" % (ETCD_AUTH_KEYS["user"], self.ec.auth.USER),
                    "%s=%s" % (ETCD_AUTH_KEYS["password_file"], self.ec.auth.password_file)]
        return out

    def spawn(self, pos):
        gen = sum(1 for i in self.incs if i.pos == pos)
        d = Daemon(self.sets(), name="n%02d" % pos, port=self.ports[pos])
        inc = Incarnation(pos, gen, d, time.monotonic())
        self.incs.append(inc)
        self.current[pos] = inc
        self.state[pos] = "up"
        return inc

    def scan_log(self, inc):
        try:
            with open(inc.d.log_path, "rb") as f:
                f.seek(inc.log_pos)
                new = f.read()
        except OSError:
            return
        inc.log_pos += len(new)
        text = new.decode(errors="replace")
        for bad in BAD_LOG:
            if bad in text:
                self.fail("daemon %s (pid %d) logged %r:\n%s" % (inc.name, inc.pid, bad,
                                                                 self.tail(inc, 30)))
        for what, secret in self.secrets():  # never a password or token in a log (issue 24)
            if secret in text:
                self.fail("daemon %s (pid %d) logged %s" % (inc.name, inc.pid, what))

    def secrets(self):
        """(what, text) a daemon must never log: every password the user had this run, and the
        start of any JWT (its base64 header)."""
        a = self.ec.auth if self.ec else None
        if a is None:
            return []
        out = [("a password of the etcd user", p) for p in self.passwords]
        if a.token == "jwt":
            out.append(("a JWT (eyJhbGciOi...)", "eyJhbGciOi"))
        return out

    def tail(self, inc, lines=12):
        return "\n".join(inc.d.output().splitlines()[-lines:])

    def keep_log(self, inc):
        if inc.log_copy is None:
            inc.log_copy = os.path.join(self.dir, "%s.pid%d.log" % (inc.name, inc.pid))
            shutil.copyfile(inc.d.log_path, inc.log_copy)

    def reap(self, inc):
        """The exit of inc, checked against what we asked for; its log kept."""
        rc = inc.d.proc.poll()
        if rc is None:
            return False
        inc.exit, inc.t_end = rc, time.monotonic()
        self.scan_log(inc)
        self.keep_log(inc)
        if (inc.expect == 0 and rc == 1 and inc.stop_without_quorum
                and "final lease not written" in inc.d.output()):
            # without quorum the final floor/revoke cannot be written: the daemon reports a
            # failed stop (exit 1, as a failed final snapshot does); the slot frees at its TTL
            self.events["term_exit1_without_quorum"] += 1
            return True
        if inc.expect is None or rc != inc.expect:
            self.fail("daemon %s (pid %d) exited with %s, expected %s:\n%s"
                      % (inc.name, inc.pid, rc, "to keep running" if inc.expect is None
                         else inc.expect, self.tail(inc, 30)))
        return True

    # -- etcd ---------------------------------------------------------------------------------
    def etcd_down(self):
        return [m for m, s in self.etcd_state.items() if s != "up"]

    def etcd_fault(self, m, how):
        if how == "kill":
            self.ec.kill(m)
            self.etcd_state[m] = "killed"
        else:
            self.ec.stop(m)
            self.etcd_state[m] = "stopped"
        if len(self.etcd_down()) >= 2 and self.quorum_lost_at is None:
            self.quorum_lost_at = time.monotonic()
            for p, st in self.state.items():
                if st == "stopping":
                    self.current[p].stop_without_quorum = True

    def etcd_heal(self, m):
        s = self.etcd_state[m]
        if s == "killed":
            self.ec.restart(m)
        elif s == "stopped":
            self.ec.cont(m)
        self.etcd_state[m] = "up"
        self.say("etcd e%d back (%s)" % (m, "restarted" if s == "killed" else "SIGCONT"))
        if len(self.etcd_down()) < 2 and self.quorum_lost_at is not None:
            lost = time.monotonic() - self.quorum_lost_at
            self.quorum_lost_total += lost
            self.quorum_lost_max = max(self.quorum_lost_max, lost)
            self.quorum_lost_at = None
            self.say("etcd quorum back after %.2f s" % lost)

    def owners(self):
        """{worker: owner value} from any answering member, None without an answer."""
        for m in range(self.ec.n):
            if self.etcd_state[m] != "up":
                continue
            st, j = self.ec.call(m, "/v3/kv/range",
                                 {"key": b64(PREFIX + "/owner/"),
                                  "range_end": b64(PREFIX + "/owner0")}, 0.5)
            if st == 200:
                out = {}
                for kv in j.get("kvs", []):
                    w = int(base64.b64decode(kv["key"]).decode().rsplit("/", 1)[1])
                    out[w] = json.loads(base64.b64decode(kv["value"]))
                return out
        return None

    def owner_history(self):
        """{slot: [(pid, started_ms), ...]} of every owner key ever created, in revision order
        (a watch from revision 1 replays etcd's history; auto-compaction is off)."""
        try:
            events = watch_events(self.ec, PREFIX + "/owner/")
        except (RuntimeError, OSError) as e:
            self.fail(str(e))
        hist = collections.defaultdict(list)
        for ev in events:
            kv = ev["kv"]
            if ev.get("type", "PUT") != "PUT" or kv.get("create_revision") != kv.get("mod_revision"):
                continue
            w = int(base64.b64decode(kv["key"]).decode().rsplit("/", 1)[1])
            v = json.loads(base64.b64decode(kv["value"]))
            hist[(DC, w)].append((int(kv["mod_revision"]), v["pid"], v.get("started_ms", 0)))
        return {s: [(p, st) for _, p, st in sorted(h)] for s, h in hist.items()}

    # -- events -----------------------------------------------------------------------------------
    def at(self, delay, what, fn):
        self.pending.append((time.monotonic() + delay, what, fn))

    def watch_reclaim(self, inc, kind):
        """If inc held a slot (last owner poll), time until another process owns it."""
        for w, v in self.last_owners.items():
            if v.get("pid") == inc.pid and w not in self.reclaim_watch:
                self.reclaim_watch[w] = (time.monotonic(), inc.pid, kind)

    def daemons_impaired(self):
        return sum(1 for s in self.state.values() if s != "up")

    def pick_up_daemon(self):
        up = [p for p, s in sorted(self.state.items()) if s == "up"]
        if not up or self.daemons_impaired() >= self.a.max_down:
            return None
        return self.rng.choice(up)

    def ev_kill9(self):
        pos = self.pick_up_daemon()
        if pos is None:
            return False
        inc = self.current[pos]
        inc.expect = -signal.SIGKILL
        self.watch_reclaim(inc, "kill9")
        inc.d.signal(signal.SIGKILL)
        if inc.d.wait_exit(5) is None:
            self.fail("daemon %s (pid %d) not dead 5 s after SIGKILL" % (inc.name, inc.pid))
        self.reap(inc)
        self.state[pos] = "down"
        back = self.rng.uniform(0.5, 2.0) * TTL_S
        self.say("kill -9 %s pid %d; restart in %.2f s" % (inc.name, inc.pid, back))
        self.at(back, "restart n%02d" % pos, lambda: self.restart(pos))
        return True

    def restart(self, pos):
        if self.security:  # a start now fails closed (exit 1): wait for the window's end
            self.at(1.0, "restart n%02d" % pos, lambda: self.restart(pos))
            return
        inc = self.spawn(pos)
        self.say("restarted %s pid %d on port %d" % (inc.name, inc.pid, self.ports[pos]))

    def ev_freeze(self):
        pos = self.pick_up_daemon()
        if pos is None:
            return False
        inc = self.current[pos]
        inc.d.signal(signal.SIGSTOP)
        inc.freezes += 1
        self.state[pos] = "frozen"
        dur = self.rng.uniform(0.5, 2.0) * TTL_S
        if dur > TTL_S:
            self.watch_reclaim(inc, "freeze")
        self.say("SIGSTOP %s pid %d for %.2f s" % (inc.name, inc.pid, dur))

        def thaw():
            inc.d.signal(signal.SIGCONT)
            inc.freeze_log.append((time.monotonic(), time.time(), dur))
            self.state[pos] = "up"
            self.say("SIGCONT %s pid %d" % (inc.name, inc.pid))
        self.at(dur, "SIGCONT n%02d" % pos, thaw)
        return True

    def ev_term(self):
        if self.security:  # its restart would wait; keep the stop path out of the window
            return False
        pos = self.pick_up_daemon()
        if pos is None:
            return False
        inc = self.current[pos]
        inc.expect = 0
        inc.stop_without_quorum = self.quorum_lost_at is not None
        self.watch_reclaim(inc, "term")
        inc.d.signal(signal.SIGTERM)
        self.state[pos] = "stopping"
        self.say("SIGTERM %s pid %d" % (inc.name, inc.pid))
        t = time.monotonic()

        def check_exit():  # polled: exit 0 within 15 s, then a restart a little later
            if self.reap(inc):
                back = self.rng.uniform(0.5, 1.0) * TTL_S
                self.say("%s exited 0 %.2f s after SIGTERM; restart in %.2f s"
                         % (inc.name, inc.t_end - t, back))
                self.state[pos] = "down"
                self.at(back, "restart n%02d" % pos, lambda: self.restart(pos))
            elif time.monotonic() - t > 15:
                self.fail("daemon %s (pid %d) still running 15 s after SIGTERM:\n%s"
                          % (inc.name, inc.pid, self.tail(inc)))
            else:
                self.at(0.1, "exit of %s" % inc.name, check_exit)
        self.at(0.1, "exit of %s" % inc.name, check_exit)
        return True

    def ev_etcd(self, how):
        up = [m for m, s in self.etcd_state.items() if s == "up"]
        if self.etcd_down():
            return False
        leader = self.ec.leader() if self.rng.random() < 0.5 else None
        m = leader if leader is not None else self.rng.choice(up)
        self.etcd_fault(m, how)
        dur = self.rng.uniform(0.5, 3.0)
        self.say("etcd %s e%d%s for %.2f s" % ("kill -9" if how == "kill" else "SIGSTOP", m,
                                               " (leader)" if m == leader else "", dur))
        self.at(dur, "etcd e%d back" % m, lambda: self.etcd_heal(m))
        return True

    def ev_quorum_loss(self):
        if self.etcd_down() or self.security:  # the window's etcdctl needs a quorum
            return False
        ms = self.rng.sample(range(self.ec.n), 2)
        hows = [self.rng.choice(["kill", "stop"]) for _ in ms]
        dur = self.rng.uniform(0.5, QUORUM_LOSS_MAX_S)
        for m, how in zip(ms, hows):
            self.etcd_fault(m, how)
        self.say("etcd quorum loss: %s for %.2f s" % (", ".join(
            "%s e%d" % (h, m) for m, h in zip(ms, hows)), dur))
        for m in ms:
            self.at(dur, "etcd e%d back" % m, lambda m=m: self.etcd_heal(m))
        if self.a.sequences and dur > TTL_S - MARGIN_MS / 1000.0 + 1:
            # every daemon is past its fence by TTL - margin after the loss began (its last
            # renewal was sent before it); checked 0.4 s before the end, 0.6 s after that
            self.at(dur - 0.4, "/seq during the quorum loss", self.check_seq_refused)
        return True

    def check_seq_refused(self):
        """Late in a long quorum loss no daemon answers /seq with a number (all fenced)."""
        if len(self.etcd_down()) < 2:
            return
        for pos, inc in sorted(self.current.items()):
            if self.state[pos] != "up" or inc.exit is not None:
                continue
            for ns in SEQ_NAMESPACES:
                st, body, _ = inc.d.http("/seq/%s" % ns["name"], timeout=1.0)
                if st == 200:
                    self.fail("daemon %s answered /seq/%s with %s %.2f s into a quorum loss "
                              "(past its fence)" % (inc.name, ns["name"], body.strip(),
                                                    time.monotonic() - self.quorum_lost_at))
                if st is not None:
                    self.seq_refused += 1
        self.say("quorum loss for %.2f s: /seq refused by every daemon up"
                 % (time.monotonic() - self.quorum_lost_at))

    # -- secured etcd: credentials change under the fleet ---------------------------------------
    def steady_daemons(self, since):
        """Incarnations up (not killed, frozen or stopping) and spawned before since."""
        return [inc for p, inc in sorted(self.current.items())
                if self.state[p] == "up" and inc.exit is None and inc.t_spawn < since]

    def expect_fenced(self, kind, since):
        """Every daemon up throughout the window must be fenced now (never issuing past it)."""
        for inc in self.steady_daemons(since):
            st, body, _ = inc.d.http("/readyz", timeout=2.0)
            fenced = inc.d.metric("snowflaked_identity_fenced")
            held = inc.d.metric("snowflaked_identity_slots_held") or 0
            if st == 200 or (held >= 1 and fenced != 1):
                self.fail("%s: daemon %s (pid %d) still ready / not fenced after the window "
                          "(readyz %s %r, fenced %s, slots %s):\n%s"
                          % (kind, inc.name, inc.pid, st, body, fenced, held, self.tail(inc, 30)))
            self.security_fenced[kind] += 1

    def etcdctl_soon(self, what, fn, deadline=None):
        """fn (etcdctl calls) now, or again every 0.5 s while an etcd fault makes it fail; the
        run fails if it cannot be done within 20 s."""
        deadline = deadline or time.monotonic() + 20
        try:
            fn()
        except (RuntimeError, OSError) as e:
            if time.monotonic() > deadline:
                self.fail("%s: etcdctl failed for 20 s: %s" % (what, e))
            self.at(0.5, what, lambda: self.etcdctl_soon(what, fn, deadline))

    def security_ok(self):
        """Security windows one at a time, with etcd whole (etcdctl needs quorum) and no
        daemon stopping (its final writes would fail: not this event's business)."""
        return (not self.security and not self.etcd_down()
                and "stopping" not in self.state.values())

    def ev_cert_rotate(self):
        if not self.ec.tls:
            return False
        serial = self.ec.tls.rotate_client()
        self.say("client certificate rotated (serial %s) under every daemon" % serial)
        before = {}
        for pos, inc in self.current.items():
            if self.state.get(pos) == "up" and inc.exit is None:
                n = inc.d.metric("snowflaked_etcd_tls_reloads_total", 'result="ok"')
                if n is not None:
                    before[pos] = (inc, n)
        self.at(4.0, "cert_rotate check", lambda: self.check_cert_reloaded(before, serial))
        return True

    def check_cert_reloaded(self, before, serial, last=False):
        """Each daemon up throughout has loaded the rotated certificate (its directory watch:
        500 ms debounce). Checked at 4 s and, for one frozen meanwhile, again at 8 s."""
        late = {}
        for pos, (inc, n) in before.items():
            if self.current.get(pos) is not inc or self.state.get(pos) != "up" or inc.exit is not None:
                continue  # restarted, frozen or stopped meanwhile: not comparable
            now = inc.d.metric("snowflaked_etcd_tls_reloads_total", 'result="ok"')
            if now is None:
                continue  # busy: the next events decide
            if now <= n and not last:
                late[pos] = (inc, n)
            elif now <= n:
                self.fail("daemon %s did not reload the rotated client certificate (serial %s) "
                          "within 8 s: snowflaked_etcd_tls_reloads_total{result=\"ok\"} %s -> %s\n%s"
                          % (inc.name, serial, n, now, self.tail(inc)))
        if late:
            self.at(4.0, "cert_rotate check", lambda: self.check_cert_reloaded(late, serial, True))
        elif not last:
            self.say("rotated client certificate (serial %s) loaded by every daemon up" % serial)

    def ev_passwd(self):
        if self.ec.auth is None or not self.security_ok():
            return False
        a, t = self.ec.auth, time.monotonic()
        new = "pw-" + os.urandom(6).hex()
        try:
            self.ec.set_user_password(new)
        except RuntimeError as e:  # an etcd fault began meanwhile: not this time
            self.say("passwd skipped: %s" % e)
            return False
        self.passwords.append(new)
        self.security.add("passwd")
        jwt = a.ttl_s if a.token == "jwt" else 0
        dur = jwt + TTL_S + 2 + self.rng.uniform(0, 2)
        self.say("password of %s changed in etcd, not in its file: every daemon must fence "
                 "within %.2f s" % (a.USER, dur))

        def restore():
            self.expect_fenced("passwd", t)
            a.password = new
            a.write_password(new)
            self.security.discard("passwd")
            self.say("password file updated: the daemons must recover")
        self.at(dur, "password file updated", restore)
        return True

    def ev_revoke(self):
        if self.ec.auth is None or not self.security_ok():
            return False
        t = time.monotonic()
        try:
            self.ec.revoke_prefix()
        except RuntimeError as e:
            self.say("revoke skipped: %s" % e)
            return False
        self.security.add("revoke")
        dur = TTL_S + 2 + self.rng.uniform(0, 2)
        self.say("permission of role %s on %s/ revoked: every daemon must fence within %.2f s"
                 % (self.ec.auth.USER, PREFIX, dur))

        def granted():
            self.security.discard("revoke")
            self.say("permission granted again: the daemons must recover")

        def grant():
            self.expect_fenced("revoke", t)
            self.etcdctl_soon("grant the permission again",
                              lambda: (self.ec.grant_prefix(), granted()))
        self.at(dur, "permission granted again", grant)
        return True

    def event(self, kind):
        fn = {"kill9": self.ev_kill9, "freeze": self.ev_freeze, "term": self.ev_term,
              "etcd_kill": lambda: self.ev_etcd("kill"), "etcd_stop": lambda: self.ev_etcd("stop"),
              "quorum_loss": self.ev_quorum_loss, "cert_rotate": self.ev_cert_rotate,
              "passwd": self.ev_passwd, "revoke": self.ev_revoke}[kind]
        if fn():
            self.events[kind] += 1
            return True
        self.skipped[kind] += 1
        return False

    SINGLE = [("kill9", 3), ("freeze", 3), ("term", 2), ("etcd_kill", 2), ("etcd_stop", 2),
              ("quorum_loss", 1)]
    SECURED = {"cert_rotate": ("tls", 1), "passwd": ("auth", 1), "revoke": ("auth", 1)}

    def kinds(self):
        """SINGLE, plus the events of the cluster's security (a plain run: SINGLE exactly, so
        a seed gives the same decisions as before)."""
        have = {"tls": bool(self.ec.tls), "auth": self.ec.auth is not None}
        return self.SINGLE + [(k, w) for k, (need, w) in sorted(self.SECURED.items()) if have[need]]

    def random_event(self, second_half=False):
        if second_half:
            # every credential event of a secured run happens at least once, however the dice
            # fell in the first half (it is what the secured run is for)
            enabled = {k for k, _ in self.kinds()}
            for kind in sorted(self.SECURED):
                if kind in enabled and not self.events[kind] and self.event(kind):
                    return
        if self.rng.random() < 0.12:
            a, b = self.rng.sample([k for k, _ in self.SINGLE if k != "quorum_loss"], 2)
            self.say("two faults at once: %s + %s" % (a, b))
            self.events["double"] += 1
            self.event(a)
            self.event(b)
            return
        kinds, weights = zip(*self.kinds())
        self.event(self.rng.choices(kinds, weights)[0])

    # -- continuous checks ------------------------------------------------------------------------
    def run_pending(self, until_all=False):
        now = time.monotonic()
        due = [p for p in self.pending if until_all or p[0] <= now]
        self.pending = [p for p in self.pending if p not in due]
        for _, _, fn in sorted(due, key=lambda p: p[0]):
            fn()

    def check_daemons(self):
        for inc in self.incs:
            if inc.exit is not None:
                continue
            if self.reap(inc):
                continue
            self.scan_log(inc)
            if self.state.get(inc.pos) != "up" or self.current[inc.pos] is not inc:
                continue
            st, body, _ = inc.d.http("/readyz", timeout=2.0)
            text = inc.d.metrics() if st is not None else None
            if st is None or text is None:
                # just started (not listening yet) or busy: fail only if it lasts
                if inc.unresponsive_since is None:
                    inc.unresponsive_since = time.monotonic()
                elif time.monotonic() - inc.unresponsive_since > 15:
                    self.fail("daemon %s (pid %d) answered no /readyz or /metrics for 15 s:\n%s"
                              % (inc.name, inc.pid, self.tail(inc)))
                continue
            inc.unresponsive_since = None
            m = {}
            for line in text.splitlines():
                for name in ("snowflaked_identity_slots_held", "snowflaked_identity_fenced",
                             "snowflaked_identity_fenced_seconds_total"):
                    if line.startswith(name + " "):
                        m[name] = float(line.split()[1])
            inc.fenced_s = m.get("snowflaked_identity_fenced_seconds_total", inc.fenced_s)
            for line in text.splitlines():
                if line.startswith('snowflaked_etcd_authentications_total{result="ok"} '):
                    inc.auths = float(line.split()[1])
                elif line.startswith('snowflaked_etcd_auth_refusals_total{reason="token"} '):
                    inc.token_refusals = float(line.split()[1])
                elif line.startswith('snowflaked_seq_etcd_claims_total{result="unknown"} '):
                    inc.seq_unknown = float(line.split()[1])
                elif line.startswith('snowflaked_seq_etcd_claims_total{result="recovered"} '):
                    inc.seq_recovered = float(line.split()[1])
                elif line.startswith('snowflaked_seq_etcd_claims_total{result="ok"} '):
                    inc.seq_claims = float(line.split()[1])
            if st == 200 and (m.get("snowflaked_identity_slots_held", 0) < 1
                              or m.get("snowflaked_identity_fenced", 1) != 0):
                # /readyz and /metrics are two requests: a fence may fall between them
                st2, _, _ = inc.d.http("/readyz", timeout=2.0)
                if st2 == 200 and inc.d.metric("snowflaked_identity_fenced") != 0:
                    pass  # still racing a fence edge; the next round decides
                elif st2 == 200 and (inc.d.metric("snowflaked_identity_slots_held") or 0) < 1:
                    self.fail("daemon %s ready with no slot held: %s" % (inc.name, m))

    def check_owners(self):
        if len(self.etcd_down()) >= 2:
            return
        o = self.owners()
        if o is None:
            return
        now = time.monotonic()
        self.last_owners = o
        for w, (t, pid, kind) in list(self.reclaim_watch.items()):
            if w in o and o[w].get("pid") != pid:
                self.reclaim_s[kind].append(now - t)
                del self.reclaim_watch[w]
        for w in range(SLOTS):
            if w in o:
                since = self.unowned_since.pop(w, None)
                if since is not None:
                    self.max_unowned = max(self.max_unowned, now - since)
            else:
                self.unowned_since.setdefault(w, now)

    def check_quorum_bound(self):
        if self.quorum_lost_at is not None and \
                time.monotonic() - self.quorum_lost_at > QUORUM_LOSS_MAX_S + 2:
            self.fail("test bug: etcd without quorum for more than %d s" % QUORUM_LOSS_MAX_S)

    def tick(self):
        self.run_pending()
        if time.monotonic() - self.last_poll >= 1.0:  # HTTP checks about once a second
            self.last_poll = time.monotonic()
            self.check_daemons()
            self.check_owners()
        self.check_quorum_bound()

    # -- run --------------------------------------------------------------------------------------
    def run(self):
        a = self.a
        self.say("chaos: %d s, %d daemons for %d slots, ttl %d s, margin %d ms, rate %d/s, "
                 "max %d daemons down, run dir %s" % (a.seconds, a.daemons, SLOTS, TTL_S,
                                                      MARGIN_MS, a.rate, a.max_down, self.dir))
        auth = None
        if a.etcd_auth:
            auth = EtcdAuth(PREFIX, token=a.etcd_auth, ttl_s=a.jwt_ttl)
        self.ec = EtcdCluster(tls=a.etcd_tls, auth=auth).__enter__()
        if auth:
            self.passwords.append(auth.password)
        if a.etcd_tls or auth:
            self.say("etcd secured: %s%s" % ("TLS with client certificates" if a.etcd_tls else "",
                                             "%sRBAC user %s, %s tokens%s" % (
                                                 ", " if a.etcd_tls else "", auth.USER, auth.token,
                                                 " ttl %d s" % auth.ttl_s if auth.token == "jwt"
                                                 else "") if auth else ""))
        self.etcd_state = {m: "up" for m in range(self.ec.n)}
        self.ports = [low_port() for _ in range(a.daemons)]
        for pos in range(a.daemons):
            self.spawn(pos)
        deadline = time.monotonic() + 30
        while self.ready_count() < SLOTS:
            self.check_daemons()
            if time.monotonic() > deadline:
                self.fail("fewer than %d daemons ready 30 s after start" % SLOTS)
            time.sleep(0.2)
        self.say("%d daemons ready; load starts" % SLOTS)
        urls = [self.url(p) for p in range(a.daemons)]
        if a.inject_static_worker is not None:  # self-test: a second holder etcd knows nothing of
            # with --sequences it serves the namespaces too, from its own file: numbers etcd
            # never granted, and some the fleet issues as well
            self.injected = Daemon(["snowflake.worker_bits=3", "snowflake.datacenter_id=%d" % DC,
                                    "snowflake.worker_id=%d" % a.inject_static_worker] + (
                                        ["sequences.namespaces=" + json.dumps(SEQ_NAMESPACES)]
                                        if a.sequences else []),
                                   name="static")
            self.say("self-test: a static daemon with worker %d on port %d: must fail"
                     % (a.inject_static_worker, self.injected.port))
            urls.append(self.injected.url("/ids?count=%d" % a.ids_per_request))
        rec = os.path.join(self.dir, "ids.v2")
        self.load = Load(urls, seconds=a.seconds + HEAL_BUDGET_S,
                         rate=a.rate, out=rec, connections_per_target=a.conns,
                         min_ids=1000)
        for ns in SEQ_NAMESPACES if a.sequences else ():
            name = ns["name"]
            self.seq_loads[name] = Load(
                ["http://127.0.0.1:%d/seqs/%s?count=%d" % (p, name, SEQ_COUNT)
                 for p in self.ports + ([self.injected.port] if self.injected else [])], seconds=a.seconds + HEAL_BUDGET_S, rate=a.seq_rate,
                out=os.path.join(self.dir, "seq-%s.v2" % name), connections_per_target=1,
                min_ids=1000, timeout_ms=SEQ_TIMEOUT_MS)
        t_chaos_end = time.monotonic() + a.seconds
        next_event = time.monotonic() + 2.0
        while time.monotonic() < t_chaos_end:
            if time.monotonic() >= next_event:
                self.random_event(t_chaos_end - time.monotonic() < a.seconds / 2)
                next_event = time.monotonic() + self.rng.uniform(0.5, 3.0)
            self.tick()
            time.sleep(0.2)
        self.heal()
        rc, rep, err = self.load.finish()
        seq_reports = {name: ld.finish() for name, ld in self.seq_loads.items()}
        self.final_checks(rc, rep, err, rec, seq_reports)

    def url(self, pos):
        return "http://127.0.0.1:%d/ids?count=%d" % (self.ports[pos], self.a.ids_per_request)

    def ready_count(self):
        return sum(1 for p, inc in self.current.items()
                   if self.state[p] == "up" and inc.exit is None and
                   inc.d.http("/readyz", timeout=1.0)[0] == 200)

    def heal(self):
        self.say("chaos over: healing every fault")
        while self.security:  # a credential window ends at its time (its fence is checked then)
            self.tick()
            time.sleep(0.2)
        while self.pending:  # SIGCONTs, restarts, etcd members back; SIGTERM exits awaited
            self.run_pending(until_all=True)
            time.sleep(0.1)
        self.ec.wait_ready(timeout=20)
        t = time.monotonic()
        deadline = min(t + 3 * TTL_S + 15, self.load.t0 + self.load.seconds - 5)
        while True:
            self.check_daemons()
            self.check_owners()
            o = self.owners() or {}
            live = {inc.pid for inc in self.current.values() if inc.exit is None}
            held = sorted(w for w, v in o.items() if v.get("pid") in live)
            ready = self.ready_count()
            if held == list(range(SLOTS)) and ready == SLOTS:
                break
            if time.monotonic() > deadline:
                self.fail("%.1f s after healing: slots held by live daemons %s, %d ready "
                          "(every slot must be held again)" % (time.monotonic() - t, held, ready))
            time.sleep(0.2)
        self.heal_s = time.monotonic() - t
        for w, since in list(self.unowned_since.items()):
            self.max_unowned = max(self.max_unowned, time.monotonic() - since)
        self.say("healed: all %d slots held and ready %.2f s after the last fault ended"
                 % (SLOTS, self.heal_s))
        if self.ec.tls or self.ec.auth is not None:
            self.independent_read()
        # The others settle too: one fenced while etcd had no quorum learns only now, at its
        # next renewal after the election, whether its lease survived (ready again) or its slot
        # went to a waiter (then it waits) — bounded by a TTL and the renewal period.
        settle = time.monotonic() + 2 * TTL_S + 5
        for inc in self.current.values():
            while True:
                st, body, _ = inc.d.http("/readyz")
                if st == 200 or (st == 503 and "waiting for a free slot" in body):
                    break
                if time.monotonic() > settle:
                    self.fail("%s neither ready nor waiting %.1f s after healing: %s %s"
                              % (inc.name, time.monotonic() - t, st, body))
                time.sleep(0.1)
        if not self.load.running():
            self.fail("healing outlasted sfload (HEAL_BUDGET_S %d)" % HEAL_BUDGET_S)
        while self.load.running():  # steady state until sfload's end, still checked
            self.tick()
            time.sleep(0.5)

    def independent_read(self):
        """etcdctl (not the harness's gateway client) over the cluster's TLS with the same CA, as
        root and, with RBAC, as the daemons' user: every slot's owner key and floor is there."""
        want = ["%s/%s/%07d/%07d" % (PREFIX, kind, DC, w)
                for kind in ("owner", "floor") for w in range(SLOTS)]
        readers = [("root", {})]
        if self.ec.auth is not None:
            a = self.ec.auth
            readers.append((a.USER, {"user": a.USER, "password": a.password}))
        if self.ec.tls:
            readers = [(who + " with the daemons' client certificate" if who != "root" else who,
                        dict(kw, cert=(self.ec.tls.client_cert, self.ec.tls.client_key))
                        if who != "root" else kw) for who, kw in readers]
        for who, kw in readers:
            _, out = self.ec.etcdctl("get", PREFIX + "/", "--prefix", "--keys-only", **kw)
            keys = set(out.split())
            missing = [k for k in want if k not in keys]
            if missing:
                self.fail("etcdctl as %s does not see %s (it sees %s)"
                          % (who, missing, sorted(keys)))
            self.say("etcdctl as %s%s sees every owner key and floor (%d keys under %s/)"
                     % (who, " over TLS" if self.ec.tls else "", len(keys), PREFIX))
        if self.ec.auth is not None:
            a = self.ec.auth
            rc, out = self.ec.etcdctl("get", "/", "--prefix", "--keys-only", user=a.USER,
                                      password=a.password, check=False,
                                      cert=(self.ec.tls.client_cert, self.ec.tls.client_key)
                                      if self.ec.tls else None)
            if rc == 0:
                self.fail("the daemons' etcd user reads outside %s/: %s" % (PREFIX, out[:200]))

    def ready_of(self, inc):
        return inc.d.http("/readyz", timeout=2.0)[0]

    def holder_of_fn(self):
        """rec -> incarnation name: by target (port) and receive time; a port's incarnations
        are separated at the middle of the gap between one's exit and the next one's spawn."""
        bounds = collections.defaultdict(list)  # pos -> [(from_ms, name)]
        for inc in self.incs:
            lst = bounds[inc.pos]
            if not lst:
                lst.append((float("-inf"), inc.name))
            else:
                prev = [i for i in self.incs if i.name == lst[-1][1]][0]
                mid = (self.load.ms(prev.t_end) + self.load.ms(inc.t_spawn)) / 2
                lst.append((mid, inc.name))

        def holder_of(r):
            if r.target >= self.a.daemons:
                return "static-injected"
            name = None
            for start, n in bounds.get(r.target, []):
                if r.ms >= start:
                    name = n
            return name
        return holder_of

    def final_checks(self, rc, rep, err, rec, seq_reports=None):
        """Every check over the run; all violations reported together."""
        problems = []
        if rep is None:
            self.fail("sfload printed no report (exit %s): %s" % (rc, err[-2000:]))
        v = rep["verify"]
        if rc != 0 or (v["duplicates"], v["non_increasing"], v["malformed"]) != (0, 0, 0):
            problems.append("sfload exit %s, verify: %d IDs, %d duplicates, %d non-increasing, "
                            "%d malformed; %s" % (rc, v["ids"], v["duplicates"],
                                                  v["non_increasing"], v["malformed"],
                                                  "; ".join(v.get("examples", [])[:4])))
        recs = read_records(rec)
        if len(recs) != v["ids"]:
            problems.append("%d records on file, sfload verified %d" % (len(recs), v["ids"]))
        # check_fleet for duplicates and per-connection order only: its one interval per target
        # does not hold when a port's daemon restarts; check_handoffs below separates those.
        fleet = check_fleet(recs, LAY)
        problems += ["records: " + p for p in fleet.problems()
                     if p.startswith(("duplicate", "... ", "connection"))]
        # a clean stop of everything still running: exit 0
        for inc in self.current.values():
            if inc.exit is None:
                inc.expect = 0
                inc.d.signal(signal.SIGTERM)
        for inc in self.current.values():
            if inc.exit is None:
                if inc.d.wait_exit(15) is None:
                    self.fail("%s not stopped 15 s after the final SIGTERM" % inc.name)
                self.reap(inc)
        hist = self.owner_history()
        by_pid = collections.defaultdict(list)
        for inc in self.incs:
            by_pid[inc.pid].append(inc)

        def inc_of(pid, started_ms):  # pids may be reused: the latest spawn before started_ms
            cands = [i for i in by_pid.get(pid, []) if i.wall_spawn * 1000 - 2000 <= started_ms]
            return max(cands, key=lambda i: i.wall_spawn).name if cands else "pid%d?" % pid
        order = {s: [inc_of(p, st) for p, st in h] for s, h in hist.items()}
        late_allowed = {inc.name: inc.freezes * self.a.conns * self.a.ids_per_request
                        for inc in self.incs}
        hr = check_handoffs(recs, LAY, self.holder_of_fn(), order)
        with open(os.path.join(self.dir, "handoffs.txt"), "w") as f:
            f.write(hr.summary() + "\netcd owner order: " + json.dumps(
                {str(k): v for k, v in order.items()}) + "\n")
        problems += ["records: " + p for p in hr.problems(late_allowed)[:20]]
        if sorted(hr.runs) != [(DC, w) for w in range(SLOTS)]:
            problems.append("not every slot issued IDs: %s" % sorted(hr.runs))
        seq = self.check_sequences(seq_reports, problems) if seq_reports else []
        if problems:
            self.fail("\n".join(problems))
        self.summary(recs, v, hr, hist)
        for line in seq:
            self.say(line)

    def check_sequences(self, seq_reports, problems):
        """--sequences: each namespace's sfload and seqcheck against etcd's claim history (after
        the final SIGTERM: every give-back written). Appends to problems; returns summary lines."""
        lines = []
        events = watch_events(self.ec, PREFIX + "/seq/next/")
        hist = counter_history(events, PREFIX)
        owners = owner_leases(watch_events(self.ec, PREFIX + "/owner/"), PREFIX)
        inc_of_lease = lease_owner_fn(owners, [(i.name, i.pid, i.wall_spawn) for i in self.incs])
        spans = [(i.pos, i.name, i.t_spawn, i.t_end) for i in self.incs]
        for name, (rc, rep, err) in sorted(seq_reports.items()):
            ld = self.seq_loads[name]
            if rep is None:
                problems.append("seq %s: sfload printed no report (exit %s): %s"
                                % (name, rc, err[-1000:]))
                continue
            v = rep["verify"]
            if rc != 0 or (v["duplicates"], v["non_increasing"], v["malformed"]) != (0, 0, 0):
                problems.append("seq %s: sfload exit %s, verify: %d numbers, %d duplicates, %d "
                                "non-increasing, %d malformed; %s"
                                % (name, rc, v["ids"], v["duplicates"], v["non_increasing"],
                                   v["malformed"], "; ".join(v.get("examples", [])[:4])))
            if name not in hist:
                problems.append("seq %s: no counter in etcd's history" % name)
                continue
            recs = read_records(ld.out)
            incs, freezes = {}, []
            for i in self.incs:
                ended = "crash" if i.exit == -signal.SIGKILL else "stop"
                # a frozen daemon answers, on SIGCONT, the requests of every connection that
                # timed out meanwhile (one per reconnect): numbers issued, never received
                lost = sum(int(dur * 1000 / SEQ_TIMEOUT_MS) + 2 for _, _, dur in i.freeze_log)
                incs[i.name] = SeqInc(i.name, ended=ended,
                                      unknown_unrecovered=max(0, int(i.seq_unknown -
                                                                     i.seq_recovered)),
                                      inflight=lost * SEQ_COUNT)
                end_ms = ld.ms(i.t_end) if i.t_end is not None else float("inf")
                for t_cont, wall_cont, dur in i.freeze_log:
                    if dur <= TTL_S + 0.5:
                        continue  # its lease may have lived on: no silence to check
                    back = resumed_after(i.d.output() if i.log_copy is None else
                                         open(i.log_copy, errors="replace").read(), wall_cont)
                    until = end_ms if back is None else (
                        ld.ms(t_cont) + (back - wall_cont) * 1000 - 100)
                    freezes.append(Freeze(i.name, ld.ms(t_cont), until, SEQ_COUNT))
            faults = sum(rep.get("faults", {}).values())
            r = check_namespace(name, recs, hist[name], holder_by_time(spans, ld.ms),
                                inc_of_lease, incs, SEQ_BLOCK_MAX[name], freezes=freezes,
                                slack_ms=100, inflight=(faults + self.a.daemons) * SEQ_COUNT)
            problems += ["seq " + p for p in r.problems()]
            with open(os.path.join(self.dir, "seq-%s.txt" % name), "w") as f:
                f.write(r.summary() + "\n")
            lines.append("seq %s: %d numbers from %d incarnations, %d claims + %d give-backs = "
                         "%.1f etcd writes per 1,000 numbers, holes %d (bound %d), %d freezes "
                         "checked" % (name, sum(r.issued.values()), len(r.issued),
                                      len(r.hist.claims), len(r.hist.givebacks), r.round_trips(),
                                      r.hole_total, sum(r.bounds.values()) + r.hole_slack,
                                      len(freezes)))
        lines.append("seq claims (sum over incarnations, last seen): ok %d, unknown %d, "
                     "recovered %d; /seq refused late in quorum losses: %d answers"
                     % (sum(i.seq_claims for i in self.incs), sum(i.seq_unknown for i in self.incs),
                        sum(i.seq_recovered for i in self.incs), self.seq_refused))
        return lines

    def summary(self, recs, v, hr, hist):
        late = sum(hr.late.values())
        runs = sum(len(r) for r in hr.runs.values())
        claims = sum(len(h) for h in hist.values())
        exits = collections.Counter(i.exit for i in self.incs)
        fenced = sum(i.fenced_s for i in self.incs)
        lines = [
            "PASS seed=%d seconds=%d" % (self.seed, self.a.seconds),
            "events: %s; skipped (limits): %s" % (dict(sorted(self.events.items())),
                                                  dict(sorted(self.skipped.items()))),
            "daemon incarnations: %d; exits %s" % (len(self.incs), dict(exits)),
            "IDs checked: %d (sfload verify: %d, 0 duplicates, 0 non-increasing)"
            % (len(recs), v["ids"]),
            "slot tenures with IDs: %d; etcd owner keys created: %d" % (runs, claims),
            "late IDs (frozen holders, allowed in-flight): %d" % late,
            "fenced time (sum over daemons, last seen): %.1f s" % fenced,
            "etcd without quorum: %.1f s in all, longest %.2f s"
            % (self.quorum_lost_total, self.quorum_lost_max),
            "longest time a slot had no owner (polled): %.2f s; heal to all %d held: %.2f s"
            % (self.max_unowned, SLOTS, self.heal_s),
            "holder fault -> new owner of its slot (polled, s): %s" % ", ".join(
                "%s n=%d max %.2f" % (k, len(v), max(v)) for k, v in sorted(self.reclaim_s.items())),
        ]
        if self.ec.tls or self.ec.auth is not None:
            lines.insert(7, "daemons seen fenced by credential events: %s"
                         % dict(sorted(self.security_fenced.items())))
        if self.ec.auth is not None:
            lines.insert(8, "etcd auth (%s tokens; sum over daemons, last seen): %d authentications, "
                         "%d calls refused for their token and repeated"
                         % (self.ec.auth.token, sum(i.auths for i in self.incs),
                            sum(i.token_refusals for i in self.incs)))
        for line in lines:
            self.say(line)

    def close(self, ok):
        if self.load:
            self.load.close()
        for ld in self.seq_loads.values():
            ld.close()
        if self.injected:
            self.injected.close()
        for inc in self.incs:
            if inc.exit is None and inc.d.alive():
                try:
                    self.keep_log(inc)
                except OSError:
                    pass
            inc.d.close()
        if self.ec:
            if not ok:
                for m in range(self.ec.n):
                    src = os.path.join(self.ec.dir, "e%d.log" % m)
                    if os.path.exists(src):
                        shutil.copyfile(src, os.path.join(self.dir, "etcd-e%d.log" % m))
            self.ec.close()
        self.event_log.close()
        if ok and not self.a.keep:
            shutil.rmtree(self.dir, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=int, default=int(os.environ.get("CHAOS_SECONDS", 300)))
    ap.add_argument("--seed", type=int, default=int(os.environ.get("CHAOS_SEED") or
                                                    random.SystemRandom().randrange(1 << 31)))
    ap.add_argument("--daemons", type=int, default=10)
    ap.add_argument("--max-down", type=int, default=2, help="daemons killed/frozen at once")
    ap.add_argument("--rate", type=int, default=200, help="sfload -R, requests/s in all")
    ap.add_argument("--conns", type=int, default=2, help="sfload connections per daemon")
    ap.add_argument("--ids-per-request", type=int, default=5)
    ap.add_argument("--inject-static-worker", type=int, metavar="W",
                    help="self-test of the checks: add a daemon with the static worker id W "
                         "(a second holder etcd never saw); the run must FAIL")
    ap.add_argument("--keep", action="store_true", help="keep the run directory on success")
    ap.add_argument("--etcd-tls", action="store_true",
                    help="etcd with https clients, --client-cert-auth and peer TLS (issue 24)")
    ap.add_argument("--etcd-auth", nargs="?", const="jwt", choices=("jwt", "simple"),
                    help="etcd with auth enabled: a user limited to the prefix, JWT (default) or "
                         "simple tokens (issue 24)")
    ap.add_argument("--jwt-ttl", type=int, default=3, help="JWT ttl in s with --etcd-auth jwt")
    ap.add_argument("--sequences", action="store_true",
                    help="segment mode too: namespaces s200, s50 and sad (adaptive 50..800) on "
                         "every daemon, one sfload each over every daemon, checked against etcd's "
                         "claim history at the end (seqcheck.py)")
    ap.add_argument("--seq-rate", type=int, default=60,
                    help="with --sequences: /seqs requests/s per namespace in all")
    a = ap.parse_args()
    if a.daemons < SLOTS:
        ap.error("at least %d daemons" % SLOTS)
    reason = ensure_etcd()
    if not reason and (a.etcd_tls or a.etcd_auth):
        reason = ensure_etcdctl()
    if reason:
        print("chaos: %s" % reason, file=sys.stderr)
        return 2
    for path in (BINARY, SFLOAD):
        if not os.access(path, os.X_OK):
            print("chaos: not built: %s" % path, file=sys.stderr)
            return 2
    c = Chaos(a)
    ok = False
    try:
        c.run()
        ok = True
    except Violation as e:
        c.say("FAIL: %s" % e)
        c.say("FAIL seed=%d: reproduce with CHAOS_SEED=%d CHAOS_SECONDS=%d make chaos; "
              "logs, events and records in %s" % (c.seed, c.seed, a.seconds, c.dir))
    except BaseException:
        c.say("ERROR seed=%d; run dir %s" % (c.seed, c.dir))
        raise
    finally:
        c.close(ok)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
