"""Segment-mode sequences on a fleet: recorded numbers checked against etcd's claim history.

    events = watch_events(ec, PREFIX + "/seq/next/")       # every revision since revision 1
    hist = counter_history(events, PREFIX)                   # {namespace: NsHistory}
    owners = owner_leases(watch_events(ec, PREFIX + "/owner/"), PREFIX)  # {lease: OwnerKey}
    rep = check_namespace("orders", recs, hist["orders"], holder_of, inc_of_lease, incs,
                          block_max=50)
    rep.problems()                                           # [] when every invariant holds
    rep.summary()                                            # numbers, round trips, holes

What etcd holds (docs/sequences.md, "In a fleet"): the counter key P/seq/next/<name>, each
revision a JSON value with decimal strings {"v":1,"next":"N","lo":"L","hi":"H","worker":W,
"lease":"<16 hex>","nonce":"<16 hex>"}. A revision whose next is above the previous one is a
claim of [previous next, next) by that lease; one whose next is below is a give-back (a clean
stop set the counter back to its first unissued number: [next, previous next) was never issued
and is granted again later). The first revision (the declare) only sets the start. The owner
keys P/owner/<dc>/<worker> (identity_etcd.c) tie a lease to the process (pid, started_ms) that
held it; the caller turns that into its incarnations (inc_of_lease).

Records: sfload --ids-out-v2 (idrecords.py: number, target, receive ms, connection, fresh bit),
one sfload per namespace; holder_of(rec) names the incarnation that answered (target plus
receive time against the restarts on that port; the caller knows them).

Checks, per namespace:
- duplicates: a number received twice (any targets);
- counter: every claim starts at the previous next (lo == previous next, hi == next: etcd's
  compare-and-swap never grants a range twice) and no nonce is used by two claims;
- outside: a number in no block that stayed granted (never claimed, or given back);
- lease: a number answered by an incarnation from a block claimed under a lease that is not
  one of that incarnation's (or a lease no owner key ever had);
- order: per incarnation, numbers strictly increase per connection (between fresh bits), and
  across its connections in receive order: a number below one received more than slack_ms
  earlier from the same incarnation (receive times on different connections jitter by an event
  loop round: not the server's order);
- frozen: for each Freeze(inc, after_ms, until_ms, allowed): at most `allowed` numbers of inc
  received in (after_ms, until_ms): a daemon resumed past its fence may send what it had in
  flight, nothing it took afterwards until it has a lease again;
- holes: numbers granted (claims minus give-backs) and never received. Bound (docs/sequences.md):
  per incarnation 2 x block_max for each crash (kill -9), stop that did not give back, or lease
  lost under it (it may hold two blocks it never issues), plus block_max per claim whose outcome
  stayed unknown and was not recovered, plus the numbers the caller knows were lost in flight
  (answered, never received: a frozen daemon's responses to timed-out connections). Checked per
  incarnation and for the namespace.
"""
import base64
import calendar
import collections
import http.client
import json
import re
import time

Claim = collections.namedtuple("Claim", "rev lo hi worker lease nonce")
GiveBack = collections.namedtuple("GiveBack", "rev frm to lease")
OwnerKey = collections.namedtuple("OwnerKey", "rev worker pid started_ms")
Freeze = collections.namedtuple("Freeze", "inc after_ms until_ms allowed")


class SeqInc:
    """What the harness knows of one daemon incarnation.
    ended: "crash" (kill -9), "stop" (SIGTERM; its give-back is looked up in etcd's history) or
    None (still running: its held blocks count as in-flight of the test, give it inflight);
    unknown_unrecovered: claims_total{result="unknown"} - {result="recovered"} last seen;
    inflight: numbers it may have answered that were never received."""

    def __init__(self, name, ended=None, unknown_unrecovered=0, inflight=0):
        self.name, self.ended = name, ended
        self.unknown_unrecovered, self.inflight = unknown_unrecovered, inflight


# -- etcd's history ------------------------------------------------------------------------------

def watch_events(ec, key_prefix, member=0, quiet_s=1.5, limit_s=30):
    """Every event under key_prefix since revision 1 (a watch replays etcd's history; the test
    clusters never compact), read from member's JSON gateway until it is quiet for quiet_s."""
    end = key_prefix[:-1] + chr(ord(key_prefix[-1]) + 1)
    conn = ec.connection(member, timeout=3)
    body = json.dumps({"create_request": {"key": _b64(key_prefix), "range_end": _b64(end),
                                          "start_revision": "1"}})
    conn.request("POST", "/v3/watch", body, ec.headers(fresh=True))
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError("etcd watch of %s answered %d" % (key_prefix, resp.status))
    dec = json.JSONDecoder()
    buf, events = "", []
    deadline = time.monotonic() + limit_s
    conn.sock.settimeout(quiet_s)
    while time.monotonic() < deadline:
        try:
            chunk = resp.read1(65536)
        except (OSError, http.client.HTTPException):
            break  # no more history for quiet_s
        if not chunk:
            break
        buf += chunk.decode()
        while True:
            buf = buf.lstrip()
            try:
                obj, end_pos = dec.raw_decode(buf)
            except ValueError:
                break
            buf = buf[end_pos:]
            if "error" in obj:  # e.g. an expired token: a partial history would mislead
                raise RuntimeError("etcd watch of %s: %s" % (key_prefix, obj["error"]))
            events += obj.get("result", {}).get("events", [])
    conn.close()
    return events


def _b64(s):
    return base64.b64encode(s.encode()).decode()


def _key(kv):
    return base64.b64decode(kv["key"]).decode()


def _value(kv):
    return json.loads(base64.b64decode(kv.get("value", "")) or b"null")


def owner_leases(events, prefix):
    """{lease (int): OwnerKey} of every owner key ever created under prefix (the first
    creation of each lease; one lease may hold several workers)."""
    out = {}
    for ev in events:
        kv = ev["kv"]
        if ev.get("type", "PUT") != "PUT" or kv.get("create_revision") != kv.get("mod_revision"):
            continue
        key = _key(kv)
        if not key.startswith(prefix + "/owner/"):
            continue
        lease = int(kv.get("lease", 0))
        v = _value(kv) or {}
        if lease and lease not in out:
            out[lease] = OwnerKey(int(kv["mod_revision"]), int(key.rsplit("/", 1)[1]),
                                  v.get("pid"), v.get("started_ms", 0))
    return out


class NsHistory:
    """One namespace's counter revisions, interpreted (module doc)."""

    def __init__(self, name):
        self.name = name
        self.claims = []       # Claim, revision order
        self.givebacks = []    # GiveBack, revision order
        self.problems = []     # inconsistencies of the counter itself
        self.notes = []
        self.start = None
        self.next = None       # the counter's last value
        self.revisions = 0
        self._granted = None

    def add(self, rev, v):
        self.revisions += 1
        try:
            nxt, lo, hi = int(v["next"]), int(v.get("lo", 0)), int(v.get("hi", 0))
            lease = int(v["lease"], 16) if v.get("lease") else 0
        except (KeyError, TypeError, ValueError) as e:
            self.problems.append("revision %d: counter value %r unreadable (%s)" % (rev, v, e))
            return
        if self.next is None:
            self.start = nxt if not lo < hi == nxt else lo
            if lo < hi == nxt:  # created by a claim
                self.claims.append(Claim(rev, lo, hi, v.get("worker"), lease, v.get("nonce")))
        elif nxt > self.next and lo == hi == nxt:
            self.notes.append("revision %d: start raised %d -> %d (nothing granted)"
                              % (rev, self.next, nxt))
        elif nxt > self.next:
            if (lo, hi) != (self.next, nxt):
                self.problems.append("revision %d: counter %d -> %d but the value says block "
                                     "[%d, %d)" % (rev, self.next, nxt, lo, hi))
            self.claims.append(Claim(rev, self.next, nxt, v.get("worker"), lease, v.get("nonce")))
        elif nxt < self.next:
            # a give-back may span the rest of the current block and the whole next one (both
            # claimed by this lease back to back): every claim it reaches into must be its own
            last = self.claims[-1] if self.claims else None
            lease = lease or (last.lease if last else 0)
            reached = [c for c in self.claims if c.hi > nxt]
            if not reached or nxt < reached[0].lo or any(c.lease != lease for c in reached):
                self.problems.append("revision %d: counter set back to %d by lease %x, into "
                                     "claims not all its own: %r" % (rev, nxt, lease, reached))
            self.givebacks.append(GiveBack(rev, nxt, self.next, lease))
        self.next = nxt
        self._granted = None

    def check_nonces(self):
        seen = {}
        for c in self.claims:
            if c.nonce is None:
                continue
            if c.nonce in seen:
                self.problems.append("nonce %s claimed twice: %r and %r" % (c.nonce, seen[c.nonce], c))
            seen[c.nonce] = c

    def granted(self):
        """[(lo, hi, Claim)] sorted by lo: the numbers each claim still grants after every
        give-back (a give-back ungrants [frm, to) of the claims that covered it)."""
        if self._granted is None:
            pieces = []
            events = sorted([(c.rev, "c", c) for c in self.claims] +
                            [(g.rev, "g", g) for g in self.givebacks], key=lambda e: e[0])
            for _, kind, e in events:
                if kind == "c":
                    pieces.append([e.lo, e.hi, e])
                else:
                    cut = []
                    for lo, hi, c in pieces:
                        if hi <= e.frm or lo >= e.to:
                            cut.append([lo, hi, c])
                            continue
                        if lo < e.frm:
                            cut.append([lo, e.frm, c])
                        if hi > e.to:
                            cut.append([e.to, hi, c])
                    pieces = cut
            self._granted = sorted((lo, hi, c) for lo, hi, c in pieces if lo < hi)
        return self._granted

    def block_of(self, n):
        """The Claim granting n, or None."""
        g = self.granted()
        lo_i, hi_i = 0, len(g)
        while lo_i < hi_i:
            mid = (lo_i + hi_i) // 2
            if g[mid][0] <= n:
                lo_i = mid + 1
            else:
                hi_i = mid
        if lo_i and g[lo_i - 1][0] <= n < g[lo_i - 1][1]:
            return g[lo_i - 1][2]
        return None


def counter_history(events, prefix):
    """{namespace: NsHistory} from the events under prefix/seq/next/."""
    out = {}
    base = prefix + "/seq/next/"
    for ev in sorted(events, key=lambda e: int(e["kv"].get("mod_revision", 0))):
        kv = ev["kv"]
        key = _key(kv)
        if not key.startswith(base):
            continue
        name = key[len(base):]
        h = out.setdefault(name, NsHistory(name))
        if ev.get("type", "PUT") != "PUT":
            h.problems.append("revision %s: counter deleted" % kv.get("mod_revision"))
            continue
        h.add(int(kv["mod_revision"]), _value(kv) or {})
    for h in out.values():
        h.check_nonces()
    return out


# -- the check -----------------------------------------------------------------------------------

class NsReport:
    def __init__(self, name, hist):
        self.name, self.hist = name, hist
        self.records = 0
        self.duplicates = []      # (number, [holders])
        self.outside = []         # rec
        self.unattributed = []    # rec
        self.wrong_lease = []     # (rec, holder, claim, incarnation of the claim's lease)
        self.non_increasing = []  # (holder, conn, previous, number)
        self.out_of_order = []    # (holder, number, (earlier number, its ms), ms)
        self.frozen = []          # (Freeze, count)
        self.holes = {}           # incarnation (or "lease:<hex>") -> numbers never received
        self.bounds = {}          # incarnation -> its allowance
        self.drops = {}           # incarnation -> (crash/stop without give-back, leases lost)
        self.hole_slack = 0
        self.issued = collections.Counter()  # incarnation -> numbers received
        self.claims_by = collections.Counter()
        self.notes = []

    @property
    def hole_total(self):
        return sum(self.holes.values())

    @property
    def granted_total(self):
        return sum(hi - lo for lo, hi, _ in self.hist.granted())

    def round_trips(self):
        """etcd writes (claims and give-backs) per 1,000 numbers received."""
        n = sum(self.issued.values())
        return 1000.0 * (len(self.hist.claims) + len(self.hist.givebacks)) / n if n else float("inf")

    def problems(self, limit=8):
        out = ["counter: " + p for p in self.hist.problems[:limit]]
        for n, hs in self.duplicates[:limit]:
            out.append("number %d received %d times (from %s)" % (n, len(hs), hs))
        if len(self.duplicates) > limit:
            out.append("... %d duplicate numbers in all" % len(self.duplicates))
        if self.unattributed:
            out.append("%d records not attributable to an incarnation, e.g. %s"
                       % (len(self.unattributed), self.unattributed[:3]))
        for r in self.outside[:limit]:
            out.append("number %d (target %d, %d ms) is in no granted block" % (r.id, r.target, r.ms))
        if len(self.outside) > limit:
            out.append("... %d numbers outside every block" % len(self.outside))
        for r, h, c, owner in self.wrong_lease[:limit]:
            out.append("number %d answered by %s is in block [%d, %d) of lease %x (%s)"
                       % (r.id, h, c.lo, c.hi, c.lease, owner or "no owner key had it"))
        if len(self.wrong_lease) > limit:
            out.append("... %d numbers from another lease's block" % len(self.wrong_lease))
        for h, conn, prev, n in self.non_increasing[:limit]:
            out.append("%s connection %d: %d after %d (not increasing)" % (h, conn, n, prev))
        for h, n, (m, m_ms), ms in self.out_of_order[:limit]:
            out.append("%s: %d received at %d ms, after %d at %d ms (the incarnation's order "
                       "broken)" % (h, n, ms, m, m_ms))
        for f, count in self.frozen:
            out.append("%s sent %d numbers between %d and %d ms (resumed past its fence, before "
                       "a new lease; allowed %d in flight)" % (f.inc, count, f.after_ms,
                                                              f.until_ms, f.allowed))
        for inc, n in sorted(self.holes.items()):
            b = self.bounds.get(inc)
            if b is None:
                out.append("%d numbers granted to %s never issued" % (n, inc))
            elif n > b + self.hole_slack:
                out.append("%s: %d numbers granted and never received, bound %d (+%d in flight): "
                           "%s" % (inc, n, b, self.hole_slack, self._bound_text(inc)))
        total_bound = sum(self.bounds.values()) + self.hole_slack
        if self.hole_total > total_bound:
            out.append("holes %d above the namespace's bound %d" % (self.hole_total, total_bound))
        return ["%s: %s" % (self.name, p) for p in out]

    def _bound_text(self, inc):
        d = self.drops.get(inc, (0, 0))
        return "%d crash/stop without give-back, %d leases lost" % d

    def summary(self):
        n = sum(self.issued.values())
        bound = sum(self.bounds.values()) + self.hole_slack
        lines = ["%s: %d numbers received from %d incarnations, %d claims, %d give-backs, "
                 "%.1f etcd writes per 1,000 numbers; holes %d (bound %d)"
                 % (self.name, n, len(self.issued), len(self.hist.claims),
                    len(self.hist.givebacks), self.round_trips(), self.hole_total, bound)]
        for inc in sorted(set(self.issued) | set(self.holes)):
            lines.append("  %s: %d received, %d claims, hole %d (bound %s; %s)"
                         % (inc, self.issued.get(inc, 0), self.claims_by.get(inc, 0),
                            self.holes.get(inc, 0), self.bounds.get(inc, "-"),
                            self._bound_text(inc)))
        return "\n".join(lines + ["  " + x for x in self.notes])


def check_namespace(name, recs, hist, holder_of, inc_of_lease, incs, block_max,
                    freezes=(), slack_ms=50, inflight=0):
    """NsReport of one namespace. recs: its sfload records; hist: its NsHistory; holder_of(rec):
    incarnation name or None; inc_of_lease(lease int): incarnation name or None; incs: {name:
    SeqInc}; block_max: the largest block (adaptive: block_max); freezes: [Freeze]; inflight:
    numbers lost in flight that no incarnation can be charged with (sfload's timed-out
    requests x numbers per request)."""
    rep = NsReport(name, hist)
    rep.records = len(recs)
    rep.hole_slack = inflight
    # duplicates
    counts = collections.Counter(r.id for r in recs)
    dup_holders = collections.defaultdict(list)
    per_inc = collections.defaultdict(list)
    for r in recs:
        h = holder_of(r)
        if counts[r.id] > 1:
            dup_holders[r.id].append(h)
        if h is None:
            rep.unattributed.append(r)
            continue
        per_inc[h].append(r)
    rep.duplicates = sorted(dup_holders.items())
    leases_of = collections.defaultdict(set)
    for lo, hi, c in hist.granted():
        leases_of[inc_of_lease(c.lease)].add(c.lease)
    for c in hist.claims:
        rep.claims_by[inc_of_lease(c.lease) or "lease:%x" % c.lease] += 1
    # blocks, leases
    seen = set()
    for h, rs in per_inc.items():
        for r in rs:
            rep.issued[h] += 1
            c = hist.block_of(r.id)
            if c is None:
                rep.outside.append(r)
                continue
            seen.add(r.id)
            owner = inc_of_lease(c.lease)
            if owner != h:
                rep.wrong_lease.append((r, h, c, owner))
    # order: per connection (exact), per incarnation in receive order (slack)
    for h, rs in per_inc.items():
        last = {}
        for r in rs:  # file order: one connection's records are in receive order
            prev = None if r.fresh else last.get(r.conn)
            if prev is not None and r.id <= prev:
                rep.non_increasing.append((h, r.conn, prev, r.id))
            last[r.conn] = r.id
        by_ms = sorted(rs, key=lambda r: r.ms)
        best = None  # (number, ms) the largest received at least slack_ms before
        j = 0
        for r in by_ms:
            while j < len(by_ms) and by_ms[j].ms < r.ms - slack_ms:
                if best is None or by_ms[j].id > best[0]:
                    best = (by_ms[j].id, by_ms[j].ms)
                j += 1
            if best is not None and r.id < best[0]:
                rep.out_of_order.append((h, r.id, best, r.ms))
    # a frozen daemon past its fence
    for f in freezes:
        count = sum(1 for r in per_inc.get(f.inc, ()) if f.after_ms < r.ms < f.until_ms)
        rep.notes.append("freeze of %s: %d numbers received in the %.0f ms from SIGCONT to its "
                         "new lease (allowed %d in flight)"
                         % (f.inc, count, max(0.0, f.until_ms - f.after_ms), f.allowed))
        if count > f.allowed:
            rep.frozen.append((f, count))
    # holes
    for lo, hi, c in hist.granted():
        missing = sum(1 for n in range(lo, hi) if n not in seen) if hi - lo <= 1 << 20 else hi - lo
        if missing:
            owner = inc_of_lease(c.lease) or "lease:%x" % c.lease
            rep.holes[owner] = rep.holes.get(owner, 0) + missing
    gave_back = {g.lease for g in hist.givebacks}
    for iname, inc in incs.items():
        leases = leases_of.get(iname, set())
        ended = 1 if inc.ended == "crash" or (
            inc.ended == "stop" and not (leases & gave_back)) else 0
        lost = max(0, len(leases) - 1)
        rep.drops[iname] = (ended, lost)
        rep.bounds[iname] = (2 * block_max * (ended + lost) + block_max * inc.unknown_unrecovered
                             + inc.inflight)
    return rep


# -- attribution helpers (test_seq_fleet.py, chaos.py --sequences) --------------------------------

def holder_by_time(spans, to_ms):
    """holder_of(rec) for daemons restarted on the same target: spans = [(target, name,
    t_spawn, t_end or None)] (monotonic times), to_ms(t) -> the load's record ms. One target's
    incarnations are split at the middle of the gap between one's exit and the next's spawn."""
    bounds = collections.defaultdict(list)
    for target, name, t_spawn, t_end in sorted(spans, key=lambda s: s[2]):
        lst = bounds[target]
        if not lst:
            lst.append((float("-inf"), name, t_end))
        else:
            prev_end = lst[-1][2] if lst[-1][2] is not None else t_spawn
            lst.append(((to_ms(prev_end) + to_ms(t_spawn)) / 2, name, t_end))

    def holder_of(r):
        name = None
        for start, n, _ in bounds.get(r.target, ()):
            if r.ms >= start:
                name = n
        return name
    return holder_of


def lease_owner_fn(owners, incs):
    """inc_of_lease(lease) from owner_leases() and incs = [(name, pid, wall_spawn_s)]: the
    latest incarnation of that pid spawned before the owner's started_ms (pids may be reused)."""
    by_pid = collections.defaultdict(list)
    for name, pid, wall in incs:
        by_pid[pid].append((wall, name))
    out = {}
    for lease, o in owners.items():
        cands = [(w, n) for w, n in by_pid.get(o.pid, ()) if w * 1000 - 2000 <= (o.started_ms or 0)]
        if cands:
            out[lease] = max(cands)[1]
    return out.get


# The identity's log lines after which a daemon issues again (identity_etcd.c): a new claim, or a
# renewal that ended a fence with the lease alive. The text log format starts with the time.
RESUMED_RE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d{3})Z .*etcd identity: (claimed "
                        r"datacenter|renewed after \d+ ms fenced)", re.M)


def resumed_after(log_text, wall):
    """Wall time (s) of the first line of RESUMED_RE after wall, or None."""
    for m in RESUMED_RE.finditer(log_text):
        t = calendar.timegm(time.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S")) + float(m.group(2))
        if t > wall:
            return t
    return None
