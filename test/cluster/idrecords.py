"""sfload --ids-out-v2 records and the fleet checks of issue 14 (design-14 §5).

    recs = read_records(path)                 # [Rec(id, target, ms, conn, fresh)], file order
    lay = Layout.parse("41/5/3/12")           # the daemons' snowflake layout (T/D/W/S)
    rep = check_fleet(recs, lay)              # FleetReport
    rep.problems()                            # [] when every invariant below holds
    hr = check_handoffs(recs, lay, holder_of, order)  # HandoffReport (restarts on one target,
    hr.problems(late_allowed)                         # a holder taking a slot back; chaos.py)

Record format (loadtest/sfload/idrec.h, README "--ids-out-v2 records"): 16 bytes, little-endian,
no header: u64 id, u16 target (index on sfload's command line), u32 ms (receive time, ms since
sfload started, its monotonic clock), u16 conn (bits 0-14 connection number, bit 15 "first ID
since this connection (re)connected"). Records of one connection are in receive order in the
file; chunks of different load threads interleave.

Invariants checked (a fleet whose worker ids move between daemons must never issue an ID twice
nor let two holders of one worker id overlap):
- duplicates: an ID received twice, from any targets;
- per connection: IDs strictly increase between two fresh bits (a reconnect starts afresh);
- per (datacenter, worker): the IDs grouped by target (one daemon = one tenure of the slot; a
  test that restarts a daemon on the same port must give it a new target instead) form
  non-interleaving intervals [min, max] in ID order ("interleave"), and the order of the
  intervals is the order of their first receive times ("order": a new holder's IDs are above
  every ID of the previous holder);
- "late": records of a holder received after the next holder's first record. Not always a bug
  (a daemon frozen while it formatted a response sends it on SIGCONT), so they are counted per
  (worker, target) and the caller decides what is allowed (the §5 freeze step allows at most
  the frozen daemon's in-flight requests).
"""
import collections
import struct

REC = struct.Struct("<QHIH")
FRESH = 0x8000

Rec = collections.namedtuple("Rec", "id target ms conn fresh")


def decode_records(data):
    """Records from the bytes of an --ids-out-v2 file. ValueError when the size is not a
    multiple of 16 (a torn or foreign file)."""
    if len(data) % REC.size:
        raise ValueError("--ids-out-v2 data of %d bytes is not a multiple of %d"
                         % (len(data), REC.size))
    return [Rec(i, t, ms, c & 0x7FFF, bool(c & FRESH)) for i, t, ms, c in REC.iter_unpack(data)]


def encode_records(recs):
    """The inverse of decode_records (for synthetic files in the self-test)."""
    return b"".join(REC.pack(r.id, r.target, r.ms, (r.conn & 0x7FFF) | (FRESH if r.fresh else 0))
                    for r in recs)


def read_records(path):
    with open(path, "rb") as f:
        return decode_records(f.read())


class Layout:
    """T/D/W/S bit widths, timestamp on top, sequence at the bottom (node_bits_low is not
    supported: the fleet tests use the default order)."""

    def __init__(self, ts_bits, dc_bits, worker_bits, seq_bits):
        if ts_bits + dc_bits + worker_bits + seq_bits > 63:
            raise ValueError("layout wider than 63 bits")
        self.ts_bits, self.dc_bits, self.worker_bits, self.seq_bits = (
            ts_bits, dc_bits, worker_bits, seq_bits)

    @classmethod
    def parse(cls, text):
        parts = [int(p) for p in text.split("/")]
        if len(parts) != 4:
            raise ValueError("layout %r is not T/D/W/S" % text)
        return cls(*parts)

    def __str__(self):
        return "%d/%d/%d/%d" % (self.ts_bits, self.dc_bits, self.worker_bits, self.seq_bits)

    def worker(self, i):
        return (i >> self.seq_bits) & ((1 << self.worker_bits) - 1)

    def datacenter(self, i):
        return (i >> (self.seq_bits + self.worker_bits)) & ((1 << self.dc_bits) - 1)

    def ticks(self, i):
        return i >> (self.seq_bits + self.worker_bits + self.dc_bits)

    def slot(self, i):
        return (self.datacenter(i), self.worker(i))


class Tenure:
    """The IDs one target issued for one (datacenter, worker)."""

    def __init__(self, slot, target):
        self.slot, self.target = slot, target
        self.count = 0
        self.min_id = self.max_id = None
        self.first_ms = self.last_ms = None
        self.ms = []  # receive times, for the late count

    def add(self, r):
        self.count += 1
        self.min_id = r.id if self.min_id is None else min(self.min_id, r.id)
        self.max_id = r.id if self.max_id is None else max(self.max_id, r.id)
        self.first_ms = r.ms if self.first_ms is None else min(self.first_ms, r.ms)
        self.last_ms = r.ms if self.last_ms is None else max(self.last_ms, r.ms)
        self.ms.append(r.ms)

    def __repr__(self):
        return ("target %d: %d IDs %d..%d received %d..%d ms"
                % (self.target, self.count, self.min_id, self.max_id, self.first_ms, self.last_ms))


class FleetReport:
    def __init__(self):
        self.records = 0
        self.duplicates = []      # (id, [targets that sent it])
        self.non_increasing = []  # (conn, previous id, id)
        self.interleave = []      # (slot, earlier tenure, later tenure): ID ranges overlap
        self.order = []           # (slot, lower tenure, higher tenure): higher received first
        self.late = {}            # (slot, target) -> records received after the next holder's first
        self.tenures = {}         # slot -> [Tenure] in ID order
        self.per_target = collections.Counter()

    def problems(self, late_allowed=None):
        """Human-readable violations; late records count unless late_allowed[(slot, target)]
        (or late_allowed[target]) allows that many."""
        late_allowed = late_allowed or {}
        out = []
        for i, targets in self.duplicates[:8]:
            out.append("duplicate ID %d from targets %s" % (i, targets))
        if len(self.duplicates) > 8:
            out.append("... %d duplicate IDs in all" % len(self.duplicates))
        for conn, prev, i in self.non_increasing[:8]:
            out.append("connection %d: ID %d after %d (not increasing)" % (conn, i, prev))
        for slot, a, b in self.interleave:
            out.append("slot %s: intervals interleave: %r and %r" % (slot, a, b))
        for slot, a, b in self.order:
            out.append("slot %s: the higher IDs came first: %r received before %r" % (slot, b, a))
        for (slot, target), n in sorted(self.late.items()):
            allowed = late_allowed.get((slot, target), late_allowed.get(target, 0))
            if n > allowed:
                out.append("slot %s: target %d sent %d IDs after the next holder's first "
                           "(allowed %d)" % (slot, target, n, allowed))
        return out

    def summary(self):
        lines = ["%d records, %d targets, %d slots" % (self.records, len(self.per_target),
                                                       len(self.tenures))]
        for slot in sorted(self.tenures):
            lines.append("  slot %s: %s" % (slot, "; ".join(repr(t) for t in self.tenures[slot])))
        return "\n".join(lines)


def check_fleet(recs, layout):
    rep = FleetReport()
    rep.records = len(recs)
    last_on_conn = {}
    tenures = {}
    for r in recs:
        rep.per_target[r.target] += 1
        prev = None if r.fresh else last_on_conn.get(r.conn)
        if prev is not None and r.id <= prev:
            rep.non_increasing.append((r.conn, prev, r.id))
        last_on_conn[r.conn] = r.id
        key = (layout.slot(r.id), r.target)
        t = tenures.get(key)
        if t is None:
            t = tenures[key] = Tenure(*key)
        t.add(r)
    # An ID received twice is a duplicate whatever its targets (the same daemon twice too).
    counts = collections.Counter(r.id for r in recs)
    by_id_targets = collections.defaultdict(list)
    for r in recs:
        if counts[r.id] > 1:
            by_id_targets[r.id].append(r.target)
    rep.duplicates = sorted((i, sorted(ts)) for i, ts in by_id_targets.items())
    by_slot = collections.defaultdict(list)
    for t in tenures.values():
        by_slot[t.slot].append(t)
    for slot, ts in by_slot.items():
        ts.sort(key=lambda t: (t.min_id, t.target))
        rep.tenures[slot] = ts
        for a, b in zip(ts, ts[1:]):
            if a.max_id >= b.min_id:
                rep.interleave.append((slot, a, b))
            if a.first_ms > b.first_ms:
                rep.order.append((slot, a, b))
            late = sum(1 for ms in a.ms if ms > b.first_ms)
            if late:
                rep.late[(slot, a.target)] = late
    return rep


class Run:
    """A maximal stretch of one holder's IDs in a slot's ID order (check_handoffs)."""

    def __init__(self, slot, holder):
        self.slot, self.holder = slot, holder
        self.count = 0
        self.min_id = self.max_id = None
        self.first_ms = None
        self.ms = []

    def add(self, r):
        self.count += 1
        if self.min_id is None:
            self.min_id = r.id
        self.max_id = r.id
        self.first_ms = r.ms if self.first_ms is None else min(self.first_ms, r.ms)
        self.ms.append(r.ms)

    def __repr__(self):
        return ("holder %s: %d IDs %d..%d first received at %d ms"
                % (self.holder, self.count, self.min_id, self.max_id, self.first_ms))


class HandoffReport:
    def __init__(self):
        self.records = 0
        self.unattributed = []   # records holder_of could not place
        self.runs = {}           # slot -> [Run] in ID order
        self.out_of_order = []   # (slot, run, etcd's holder order): a run no ownership explains
        self.order = []          # (slot, lower run, higher run): the higher run was received first
        self.late = {}           # (slot, holder) -> records received after the next run's first

    def problems(self, late_allowed=None):
        """Violations; a holder's late records count unless late_allowed[holder] allows them
        (summed over the holder's runs in one slot)."""
        late_allowed = late_allowed or {}
        out = []
        if self.unattributed:
            out.append("%d records not attributable to a holder, e.g. %s"
                       % (len(self.unattributed), self.unattributed[:3]))
        for slot, run, order in self.out_of_order:
            out.append("slot %s: in ID order, %r does not follow etcd's order of holders %s "
                       "(two holders at once, or IDs below a predecessor's)" % (slot, run, order))
        for slot, a, b in self.order:
            out.append("slot %s: the higher IDs came first: %r received before %r" % (slot, b, a))
        for (slot, holder), n in sorted(self.late.items(), key=repr):
            if n > late_allowed.get(holder, 0):
                out.append("slot %s: holder %s sent %d IDs after the next holder's first "
                           "(allowed %d)" % (slot, holder, n, late_allowed.get(holder, 0)))
        return out

    def summary(self):
        lines = ["%d records, %d slots" % (self.records, len(self.runs))]
        for slot in sorted(self.runs):
            lines.append("  slot %s: %d runs: %s" % (slot, len(self.runs[slot]), "; ".join(
                repr(r) for r in self.runs[slot])))
        return "\n".join(lines)


def check_handoffs(recs, layout, holder_of, order):
    """Per (datacenter, worker) check for fleets whose holders restart on the same target or
    take a slot back after another holder had it (check_fleet's one-interval-per-target would
    call that interleaving). holder_of(rec) names the process that sent rec (None: unknown);
    order[slot] is the sequence of holders etcd gave the slot to, in revision order (a holder
    may appear more than once). The slot's IDs in ID order split into runs of one holder; the
    runs' holders must be a subsequence of order[slot] (consecutive repeats merged): two holders
    at once, or a holder issuing below its predecessor, produce a run etcd's order cannot
    explain. Then, as in check_fleet, consecutive runs must be received in ID order, and a
    run's records received after the next run's first are counted as late."""
    rep = HandoffReport()
    rep.records = len(recs)
    by_slot = collections.defaultdict(list)
    for r in recs:
        h = holder_of(r)
        if h is None:
            rep.unattributed.append(r)
            continue
        by_slot[layout.slot(r.id)].append((r.id, h, r))
    for slot, items in by_slot.items():
        items.sort(key=lambda x: x[0])
        runs = []
        for _, h, r in items:
            if not runs or runs[-1].holder != h:
                runs.append(Run(slot, h))
            runs[-1].add(r)
        rep.runs[slot] = runs
        seq = [h for k, h in enumerate(order.get(slot, [])) if k == 0 or order[slot][k - 1] != h]
        pos = 0
        for run in runs:
            while pos < len(seq) and seq[pos] != run.holder:
                pos += 1
            if pos == len(seq):
                rep.out_of_order.append((slot, run, seq))
                break
            pos += 1
        for a, b in zip(runs, runs[1:]):
            if a.first_ms > b.first_ms:
                rep.order.append((slot, a, b))
            late = sum(1 for ms in a.ms if ms > b.first_ms)
            if late:
                key = (slot, a.holder)
                rep.late[key] = rep.late.get(key, 0) + late
    return rep
