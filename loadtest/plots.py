#!/usr/bin/env python3
"""Plots of loadtest/bench.py's results with gnuplot: the data as .dat files (whitespace
separated, one header line, what gnuplot reads) and one image per figure, side by side.

    python3 loadtest/plots.py build/bench/results.json OUTDIR [--format svg|png]

Figures (each drawn only when its section is in the results):
  concurrency-throughput  req/s vs connections, ours vs each peer, one panel per protocol (sweep)
  concurrency-latency     p50/p99/p99.9 vs connections, ours vs each peer (sweep)
  peers                   ours/peer ratios of req/s, p99 and server CPU per request for every
                          row of the peers table (HTTP, memcached, TCP echo)
  openloop                p50/p99/p99.9 vs offered req/s (sfload -R), the knee of each server
                          marked: the highest offered rate served at >= 95 % with p99 under the
                          bound (openloop)
  tls                     over TLS 1.3: server CPU-us per request (per connection for the
                          connection-per-request rows) and req/s of ours and each peer, side by
                          side, log scale; ours' bars are missing when its build had no TLS
                          listener (tls)
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys

OURS_COLOR = "#1f77b4"
PEER_COLOR = "#d62728"
PCTS = (("p50", "p50", 1), ("p99", "p99", 2), ("p999", "p99.9", 3))  # key, label, dash type


def slug(text):
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def gp_str(text):
    """A gnuplot double-quoted string (with enhanced text off for every label we set)."""
    return '"%s"' % text.replace("\\", "\\\\").replace('"', '\\"')


def terminal(fmt, width, height):
    if fmt == "png":
        return "set terminal pngcairo size %d,%d font 'sans,10' noenhanced" % (width, height)
    return "set terminal svg size %d,%d font 'sans,11' noenhanced" % (width, height)


def write_dat(path, header, rows):
    with open(path, "w") as f:
        f.write("# " + " ".join(header) + "\n")
        for r in rows:
            f.write(" ".join(fmt_cell(v) for v in r) + "\n")


def fmt_cell(v):
    if isinstance(v, float):
        return "%.3f" % v
    if v == "NaN":
        return v
    if isinstance(v, str):
        return '"%s"' % v
    return str(v)


def run_gnuplot(script, image):
    r = subprocess.run(["gnuplot"], input=script, text=True, capture_output=True, timeout=60)
    if r.returncode != 0 or not os.path.exists(image):
        sys.exit("gnuplot failed on %s: %s" % (image, r.stderr.strip()[-800:]))


def percentile_plots(path, peer):
    """gnuplot plot clauses for p50/p99/p99.9 of ours and the peer from a .dat file whose column
    1 is the server, 2 the x value and 4, 5, 6 the percentiles."""
    plots = []
    for who, color, label in (("ours", OURS_COLOR, "snowflaked"), ("peer", PEER_COLOR, peer)):
        for col, (_, pct, dt) in zip((4, 5, 6), PCTS):
            plots.append("%s using 2:(strcol(1) eq '%s' ? $%d : 1/0) with linespoints lw 2 dt %d "
                         "pt 7 ps 0.6 lc rgb '%s' title %s" % (
                             path, who, col, dt, color, gp_str("%s %s" % (label, pct))))
    return plots


# ---- figures -----------------------------------------------------------------------------------


def concurrency_figures(sweep, outdir, fmt):
    """sweep: [{workload, peer, points: [{server, connections, rps, p50, p99, p999, cpu_us}]}]."""
    dats = []
    for w in sweep:
        name = "concurrency-%s.dat" % slug(w["workload"])
        rows = sorted(w["points"], key=lambda p: (p["server"] != "ours", p["connections"]))
        write_dat(os.path.join(outdir, name),
                  ["server", "connections", "req_per_s", "p50_us", "p99_us", "p999_us",
                   "cpu_us_per_req"],
                  [(p["server"], p["connections"], float(p["rps"]), float(p["p50"]),
                    float(p["p99"]), float(p["p999"]), float(p["cpu_us"])) for p in rows])
        dats.append((w, name))
    n = len(dats)
    images = []
    for kind in ("throughput", "latency"):
        image = "concurrency-%s.%s" % (kind, fmt)
        s = [terminal(fmt, 420 * n + 60, 420 if kind == "throughput" else 480), "set output %s" % gp_str(os.path.join(outdir, image)),
             "set multiplot layout 1,%d title %s" % (n, gp_str(
                 "requests/s vs connections (closed loop, sfload)" if kind == "throughput" else
                 "latency vs connections: p50 solid, p99 dashed, p99.9 dotted (closed loop)")),
             "set logscale x", "set grid", "set xlabel 'connections'",
             "set key top left" if kind == "throughput" else "set key below maxrows 2"]
        for w, name in dats:
            path = gp_str(os.path.join(outdir, name))
            s.append("set title %s" % gp_str("%s: ours vs %s" % (w["workload"], w["peer"])))
            if kind == "throughput":
                s += ["unset logscale y", "set ylabel 'requests/s'", "set yrange [0:*]",
                      "set format y '%.0s%c'"]
                plots = ["%s using 2:(strcol(1) eq '%s' ? $3 : 1/0) with linespoints lw 2 pt 7 "
                         "lc rgb '%s' title %s" % (path, who, color, gp_str(label))
                         for who, color, label in (("ours", OURS_COLOR, "snowflaked"),
                                                   ("peer", PEER_COLOR, w["peer"]))]
            else:
                s += ["set logscale y", "set ylabel 'latency (us)'", "set yrange [*:*]",
                      "set format y '%g'"]
                plots = percentile_plots(path, w["peer"])
            s.append("plot " + ", \\\n     ".join(plots))
        s.append("unset multiplot")
        run_gnuplot("\n".join(s) + "\n", os.path.join(outdir, image))
        images.append(image)
    return images


def peers_figure(peers, outdir, fmt):
    """peers: [{name, peer, ours: {rps, p99, cpu_us}, peer_figures: {...}}] -> ratio bars."""
    name = "peers.dat"
    rows = []
    for r in peers:
        o, p = r["ours"], r["peer_figures"]
        rows.append((r["name"], r["peer"], float(o["rps"]), float(p["rps"]),
                     o["rps"] / p["rps"] if p["rps"] else 0.0, float(o["p99"]), float(p["p99"]),
                     o["p99"] / p["p99"] if p["p99"] else 0.0, float(o["cpu_us"]),
                     float(p["cpu_us"]), o["cpu_us"] / p["cpu_us"] if p["cpu_us"] else 0.0))
    write_dat(os.path.join(outdir, name),
              ["workload", "peer", "ours_req_per_s", "peer_req_per_s", "rps_ratio", "ours_p99_us",
               "peer_p99_us", "p99_ratio", "ours_cpu_us", "peer_cpu_us", "cpu_ratio"], rows)
    image = "peers.%s" % fmt
    path = gp_str(os.path.join(outdir, name))
    ratios = [v for r in rows for v in (r[4], r[7], r[10]) if v > 0] or [1.0]
    s = [terminal(fmt, max(900, 160 * len(rows) + 240), 560),
         "set output %s" % gp_str(os.path.join(outdir, image)),
         "set title 'ours / peer per workload (log scale): req/s above 1 is better; p99 and "
         "CPU per request below 1 are better'",
         "set style data histograms", "set style histogram clustered gap 1",
         "set style fill solid 0.85 border -1", "set boxwidth 0.9", "set grid ytics",
         "set logscale y", "set ylabel 'ours / peer'", "set xrange [-0.6:%g]" % (len(rows) - 0.4),
         "set yrange [%g:%g]" % (min(0.5, min(ratios) / 1.5), max(2.0, max(ratios) * 1.5)),
         "set xtics rotate by 25 right font ',9'", "set key top right", "set bmargin 9",
         "set lmargin 16",
         # value labels over the bars: a cluster of 3 with gap 1 puts the bars at -0.25, 0, 0.25
         "plot %s using 5:xticlabels(stringcolumn(1).' vs '.stringcolumn(2)) lc rgb '#2ca02c' "
         "title 'req/s', \\\n     '' using 8 lc rgb '#ff7f0e' title 'p99 latency', \\\n"
         "     '' using 11 lc rgb '#9467bd' title 'server CPU-us per request', \\\n"
         "     '' using ($0-0.25):5:(sprintf('%%.2f',$5)) with labels offset 0,0.6 font ',8' "
         "notitle, \\\n"
         "     '' using ($0):8:(sprintf('%%.2f',$8)) with labels offset 0,0.6 font ',8' notitle, "
         "\\\n"
         "     '' using ($0+0.25):11:(sprintf('%%.2f',$11)) with labels offset 0,0.6 font ',8' "
         "notitle, \\\n"
         "     1 with lines lc rgb 'black' dt 2 notitle" % path]
    run_gnuplot("\n".join(s) + "\n", os.path.join(outdir, image))
    return [image]


def openloop_figure(openloop, outdir, fmt):
    """openloop: [{workload, peer, p99_bound_us, servers: {label: {knee, points: [{offered,
    achieved, p50, p99, p999}]}}}]: latency vs offered rate, knees as vertical lines."""
    n = len(openloop)
    image = "openloop.%s" % fmt
    s = [terminal(fmt, 460 * n + 60, 500), "set output %s" % gp_str(os.path.join(outdir, image)),
         "set multiplot layout 1,%d title %s" % (n, gp_str(
             "open loop (sfload -R): latency vs offered load; p50 solid, p99 dashed, p99.9 "
             "dotted; vertical line = knee")),
         "set grid", "set logscale y", "set key below maxrows 2", "set xrange [0:*]",
         "set xlabel 'offered requests/s'", "set ylabel 'latency (us)'", "set format x '%.0s%c'"]
    for w in openloop:
        name = "openloop-%s.dat" % slug(w["workload"])
        rows = []
        for who in ("ours", "peer"):
            srv = w["servers"].get(who)
            for p in (srv or {}).get("points", []):
                # a step where nothing completed in the window has no latency (not 0 us)
                lat = [float(p[k]) if p["achieved"] else "NaN" for k in ("p50", "p99", "p999")]
                rows.append((who, float(p["offered"]), float(p["achieved"]), *lat))
        write_dat(os.path.join(outdir, name),
                  ["server", "offered_req_per_s", "achieved_req_per_s", "p50_us", "p99_us",
                   "p999_us"], rows)
        path = gp_str(os.path.join(outdir, name))
        knees = {who: (w["servers"].get(who) or {}).get("knee") for who in ("ours", "peer")}
        s.append("unset arrow")
        s.append("set title %s" % gp_str("%s: knee ours %s, %s %s" % (
            w["workload"], kfmt(knees["ours"]), w["peer"], kfmt(knees["peer"]))))
        for i, (who, color) in enumerate((("ours", OURS_COLOR), ("peer", PEER_COLOR))):
            if knees[who]:
                s.append("set arrow %d from %f, graph 0 to %f, graph 1 nohead lw 1.5 dt 4 "
                         "lc rgb '%s'" % (i + 1, knees[who], knees[who], color))
        s.append("set arrow 3 from graph 0, first %f to graph 1, first %f nohead lc rgb 'gray' "
                 "dt 3" % (w["p99_bound_us"], w["p99_bound_us"]))
        s.append("plot " + ", \\\n     ".join(percentile_plots(path, w["peer"])))
    s.append("unset multiplot")
    run_gnuplot("\n".join(s) + "\n", os.path.join(outdir, image))
    return [image]


def tls_figure(tls, outdir, fmt):
    """tls: [{name, peer, per, ours: {rps, p99, cpu_us} or None, peer_figures}] -> two panels of
    bars, one above the other (server CPU, req/s), ours and the peer per workload."""
    name = "tls.dat"
    rows = []
    for r in tls:
        o, p = r.get("ours") or {}, r["peer_figures"]
        label = re.sub(r"^GET /id |\s*-c \d+$", "", r["name"])  # the rows are all GET /id, -c 50
        rows.append(("%s vs %s (CPU per %s)" % (label, r["peer"], r["per"]), r["peer"],
                     float(o["rps"]) if o else "NaN", float(p["rps"]),
                     float(o["p99"]) if o else "NaN", float(p["p99"]),
                     float(o["cpu_us"]) if o else "NaN", float(p["cpu_us"])))
    write_dat(os.path.join(outdir, name),
              ["workload", "peer", "ours_req_per_s", "peer_req_per_s", "ours_p99_us",
               "peer_p99_us", "ours_cpu_us", "peer_cpu_us"], rows)
    image = "tls.%s" % fmt
    path = gp_str(os.path.join(outdir, name))
    peers = ", ".join(sorted(set(r["peer"] for r in tls)))
    title = "over TLS 1.3 (one certificate, one suite; log scale)"
    if not any(r.get("ours") for r in tls):
        title += ": snowflaked's rows missing (no TLS listener in that build)"
    s = [terminal(fmt, max(900, 220 * len(rows) + 200), 900),
         "set output %s" % gp_str(os.path.join(outdir, image)),
         "set multiplot layout 2,1 title %s" % gp_str(title),
         "set datafile missing 'NaN'", "set style data histograms",
         "set style histogram clustered gap 1", "set style fill solid 0.85 border -1",
         "set boxwidth 0.9", "set grid ytics", "set logscale y", "set key top left",
         "set xtics rotate by 12 right font ',8'", "set lmargin 14", "set bmargin 6",
         "set xrange [-0.6:%g]" % (len(rows) - 0.4)]
    for col, title in ((7, "server CPU-us per request (or connection): lower is better"),
                       (3, "requests/s: higher is better")):
        s += ["set title %s" % gp_str(title), "set ylabel %s" % gp_str(title.split(":")[0])]
        s.append("plot %s using %d:xticlabels(stringcolumn(1)) lc rgb '%s' title 'snowflaked', "
                 "\\\n     '' using %d lc rgb '%s' title %s" % (
                     path, col, OURS_COLOR, col + 1, PEER_COLOR, gp_str(peers)))
    s.append("unset multiplot")
    run_gnuplot("\n".join(s) + "\n", os.path.join(outdir, image))
    return [image]


def kfmt(rate):
    if not rate:
        return "none"
    return "%.0f/s" % rate if rate < 10000 else "%.0fk/s" % (rate / 1000.0)


def render(results, outdir, fmt="svg"):
    """Writes the .dat files and images of every section present; returns the image names, or
    None (with a message on stderr) when gnuplot is not installed."""
    if not shutil.which("gnuplot"):
        print("plots: gnuplot not found, no images (Debian: apt-get install gnuplot-nox; "
              "make bench installs it unless --no-install); the data is in results.json",
              file=sys.stderr)
        return None
    os.makedirs(outdir, exist_ok=True)
    images = []
    if results.get("sweep"):
        images += concurrency_figures(results["sweep"], outdir, fmt)
    if results.get("peers"):
        images += peers_figure(results["peers"], outdir, fmt)
    if results.get("openloop"):
        images += openloop_figure(results["openloop"], outdir, fmt)
    if results.get("tls"):
        images += tls_figure(results["tls"], outdir, fmt)
    return images


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", help="results.json written by loadtest/bench.py")
    ap.add_argument("outdir", help="directory for the .dat files and images")
    ap.add_argument("--format", choices=("svg", "png"), default="svg")
    args = ap.parse_args()
    with open(args.results) as f:
        results = json.load(f)
    images = render(results, args.outdir, args.format)
    if images is None:
        sys.exit(1)
    for image in images:
        print(os.path.join(args.outdir, image))


if __name__ == "__main__":
    main()
