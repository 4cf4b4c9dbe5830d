#!/usr/bin/env python3
"""Draw cost-against-n plots and print tables from criterion's output.

Usage: python3 benches/plot.py [CRITERION_DIR] [OUT_DIR]

CRITERION_DIR defaults to $CARGO_TARGET_DIR/criterion, else target/criterion.
OUT_DIR defaults to benches/plots. Needs only python3: the plots are SVG
written by hand (log-log axes, one line per implementation), so no plotting
library has to be installed. For every benchmark group (for example
"table2/start" or "peers/insert_cancel") it writes OUT_DIR/<group>.svg and
prints a markdown table of median time per operation, with each
implementation's ratio to tickwheel ("tickwheel" or "7-hierarchical").

Groups named "concurrent/..." (benches/concurrent.rs) are drawn differently:
the parameter is the number of threads and one iteration is one start/stop
pair, so the table and the plot show throughput (million pairs per second,
from the median time per pair) against threads, on linear axes. The table
gives each implementation's ratio to the best mutex-based peer at the same
thread count, and each tickwheel row's ratio to its own 1-thread figure.
"""

import json
import math
import os
import sys
from collections import defaultdict

REFERENCES = ("tickwheel", "7-hierarchical")
COLOURS = ["#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02",
           "#a6761d", "#666666", "#1f78b4"]


def load(root):
    """{group: {function: {n: mean ns}}} from every new/benchmark.json."""
    groups = defaultdict(lambda: defaultdict(dict))
    for directory, _, files in os.walk(root):
        if os.path.basename(directory) != "new" or "benchmark.json" not in files:
            continue
        with open(os.path.join(directory, "benchmark.json")) as f:
            bench = json.load(f)
        with open(os.path.join(directory, "estimates.json")) as f:
            estimates = json.load(f)
        n = int(bench.get("value_str") or 0)
        groups[bench["group_id"]][bench["function_id"]][n] = \
            estimates["median"]["point_estimate"]
    return groups


def human(ns):
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns:.3g} ns"


def table(group, series):
    sizes = sorted({n for points in series.values() for n in points})
    ref = next((r for r in REFERENCES if r in series), None)
    lines = [f"### {group}", "",
             "| implementation | " + " | ".join(f"n = {n:,}" for n in sizes) + " |",
             "|---|" + "---:|" * len(sizes)]
    for name in sorted(series):
        cells = []
        for n in sizes:
            ns = series[name].get(n)
            if ns is None:
                cells.append("-")
                continue
            cell = human(ns)
            base = series[ref].get(n) if ref else None
            if base and name != ref:
                cell += f" ({ns / base:.2f}x)"
            cells.append(cell)
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    if ref:
        lines += ["", f"(x) = time relative to {ref} at the same n; above 1 means {ref} is faster."]
    return "\n".join(lines)


def svg(group, series):
    width, height, left, right, top, bottom = 760, 460, 80, 230, 40, 60
    points = [(n, ns) for s in series.values() for n, ns in s.items() if n > 0 and ns > 0]
    if not points:
        return None
    lx = [math.log10(n) for n, _ in points]
    ly = [math.log10(ns) for _, ns in points]
    x0, x1 = math.floor(min(lx)), math.ceil(max(lx))
    y0, y1 = math.floor(min(ly)), math.ceil(max(ly))
    x1 = max(x1, x0 + 1)
    y1 = max(y1, y0 + 1)
    pw, ph = width - left - right, height - top - bottom

    def px(n):
        return left + (math.log10(n) - x0) / (x1 - x0) * pw

    def py(ns):
        return top + ph - (math.log10(ns) - y0) / (y1 - y0) * ph

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="12">',
           '<rect width="100%" height="100%" fill="white"/>',
           f'<text x="{left}" y="22" font-size="15">{group}: median time per operation</text>']
    for e in range(x0, x1 + 1):
        x = left + (e - x0) / (x1 - x0) * pw
        out.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + ph}" stroke="#ddd"/>')
        out.append(f'<text x="{x:.1f}" y="{top + ph + 18}" text-anchor="middle">1e{e}</text>')
    for e in range(y0, y1 + 1):
        y = top + ph - (e - y0) / (y1 - y0) * ph
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + pw}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{human(10 ** e)}</text>')
    out.append(f'<text x="{left + pw / 2}" y="{height - 15}" text-anchor="middle">'
               'armed timers n (log)</text>')
    for i, name in enumerate(sorted(series)):
        colour = COLOURS[i % len(COLOURS)]
        pts = sorted((n, ns) for n, ns in series[name].items() if n > 0 and ns > 0)
        if not pts:
            continue
        path = " ".join(f"{px(n):.1f},{py(ns):.1f}" for n, ns in pts)
        out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for n, ns in pts:
            out.append(f'<circle cx="{px(n):.1f}" cy="{py(ns):.1f}" r="3" fill="{colour}"/>')
        ly_ = top + 14 + 18 * i
        out.append(f'<line x1="{left + pw + 15}" y1="{ly_ - 4}" x2="{left + pw + 35}" '
                   f'y2="{ly_ - 4}" stroke="{colour}" stroke-width="2"/>')
        out.append(f'<text x="{left + pw + 40}" y="{ly_}">{name}</text>')
    out.append("</svg>")
    return "\n".join(out)


MUTEX_PEERS = ("mutex-binaryheap", "mutex-wheel", "sharded-mutex-wheel")


def concurrent_table(group, series):
    """Throughput against threads, with ratios (see the module docs)."""
    threads = sorted({n for points in series.values() for n in points})
    rate = {name: {n: 1e3 / ns for n, ns in points.items()} for name, points in series.items()}
    best = {}
    for n in threads:
        peers = [(rate[p][n], p) for p in MUTEX_PEERS if n in rate.get(p, {})]
        if peers:
            best[n] = max(peers)
    lines = [f"### {group}", "",
             "| implementation | " + " | ".join(f"{n} thread{'s' if n > 1 else ''}"
                                               for n in threads) + " |",
             "|---|" + "---:|" * len(threads)]
    for name in sorted(rate):
        cells = []
        for n in threads:
            r = rate[name].get(n)
            if r is None:
                cells.append("-")
                continue
            cell = f"{r:.2f} M/s"
            notes = []
            if n in best and name not in MUTEX_PEERS:
                notes.append(f"{r / best[n][0]:.2f}x best mutex")
            one = rate[name].get(1)
            if name.startswith("tickwheel") and one and n > 1:
                notes.append(f"{r / one:.2f}x own 1-thread")
            if notes:
                cell += " (" + ", ".join(notes) + ")"
            cells.append(cell)
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "Million start/stop pairs per second over all threads (median). "
              "Best mutex peer per column: " + ", ".join(
                  f"{n} thread{'s' if n > 1 else ''}: {best[n][1]}" for n in threads if n in best)
              + "."]
    return "\n".join(lines)


def concurrent_svg(group, series):
    width, height, left, right, top, bottom = 760, 460, 80, 230, 40, 60
    rate = {name: {n: 1e3 / ns for n, ns in points.items()} for name, points in series.items()}
    threads = sorted({n for points in rate.values() for n in points})
    if not threads:
        return None
    x0, x1 = 0, max(threads) + 1
    top_rate = max(r for points in rate.values() for r in points.values())
    step = 10 ** math.floor(math.log10(top_rate)) if top_rate > 0 else 1
    y1 = math.ceil(top_rate / step) * step
    pw, ph = width - left - right, height - top - bottom

    def px(n):
        return left + (n - x0) / (x1 - x0) * pw

    def py(r):
        return top + ph - r / y1 * ph

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="12">',
           '<rect width="100%" height="100%" fill="white"/>',
           f'<text x="{left}" y="22" font-size="15">{group}: start/stop pairs per second</text>']
    for n in threads:
        out.append(f'<line x1="{px(n):.1f}" y1="{top}" x2="{px(n):.1f}" y2="{top + ph}" stroke="#ddd"/>')
        out.append(f'<text x="{px(n):.1f}" y="{top + ph + 18}" text-anchor="middle">{n}</text>')
    ticks = int(round(y1 / step))
    for k in range(ticks + 1):
        r = k * step
        out.append(f'<line x1="{left}" y1="{py(r):.1f}" x2="{left + pw}" y2="{py(r):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{left - 6}" y="{py(r) + 4:.1f}" text-anchor="end">{r:g} M/s</text>')
    out.append(f'<text x="{left + pw / 2}" y="{height - 15}" text-anchor="middle">threads</text>')
    for i, name in enumerate(sorted(rate)):
        colour = COLOURS[i % len(COLOURS)]
        pts = sorted(rate[name].items())
        path = " ".join(f"{px(n):.1f},{py(r):.1f}" for n, r in pts)
        dash = ' stroke-dasharray="5,3"' if name in MUTEX_PEERS else ""
        out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>')
        for n, r in pts:
            out.append(f'<circle cx="{px(n):.1f}" cy="{py(r):.1f}" r="3" fill="{colour}"/>')
        ly_ = top + 14 + 18 * i
        out.append(f'<line x1="{left + pw + 15}" y1="{ly_ - 4}" x2="{left + pw + 35}" '
                   f'y2="{ly_ - 4}" stroke="{colour}" stroke-width="2"{dash}/>')
        out.append(f'<text x="{left + pw + 40}" y="{ly_}">{name}</text>')
    out.append("</svg>")
    return "\n".join(out)


def main():
    target = os.environ.get("CARGO_TARGET_DIR", "target")
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(target, "criterion")
    out_dir = sys.argv[2] if len(sys.argv) > 2 else os.path.join("benches", "plots")
    groups = load(root)
    if not groups:
        sys.exit(f"no criterion results under {root}")
    os.makedirs(out_dir, exist_ok=True)
    for group in sorted(groups):
        concurrent = group.startswith("concurrent/")
        print((concurrent_table if concurrent else table)(group, groups[group]))
        print()
        drawing = (concurrent_svg if concurrent else svg)(group, groups[group])
        if drawing:
            path = os.path.join(out_dir, group.replace("/", "_") + ".svg")
            with open(path, "w") as f:
                f.write(drawing)
            print(f"![{group}]({os.path.relpath(path)})")
            print()


if __name__ == "__main__":
    main()
