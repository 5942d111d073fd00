#!/usr/bin/env python3
"""Sums the reports of Halide's own profiler over every call of a kernel and
prints each Func's share of the time: where a kernel spends it, when perf
cannot say (JIT code has no symbols, and this VM exposes no hardware
counters). Halide prints a report per call; one call holds only about one
sample per millisecond, hence the sum.

    HL_JIT_TARGET=host-profile <build>/bench/layer_bench --peak_gflops=P \\
        --benchmark_filter='conv3x3_64_64_128/input_grad/segtile' 2>&1 \\
      | ~/.cache/segtile/venv/bin/python bench/halide_profile.py

Reads the profiler's text on stdin; writes a markdown table per pipeline.
"""
import re
import sys
from collections import defaultdict

HEADER = re.compile(r"^(\S+)\s*$")
TOTAL = re.compile(r"^\s+total time: ([\d.]+) ms\s+samples: (\d+)")
FUNC = re.compile(r"^\s{4}(.+?):\s+([\d.]+)ms \(\s*[\d.]+%\)(?:\s+threads: ([\d.]+))?(?:.*peak: (\d+))?")


def main():
    pipelines = {}
    name = None
    for line in sys.stdin:
        m = TOTAL.match(line)
        if m and name:
            p = pipelines.setdefault(name, {"runs": 0, "ms": 0.0, "samples": 0, "funcs": defaultdict(float),
                                            "peak": {}})
            p["runs"] += 1
            p["ms"] += float(m.group(1))
            p["samples"] += int(m.group(2))
            continue
        m = FUNC.match(line)
        if m and name in pipelines:
            p = pipelines[name]
            p["funcs"][m.group(1)] += float(m.group(2))
            if m.group(4):
                p["peak"][m.group(1)] = int(m.group(4))
            continue
        m = HEADER.match(line)
        if m and not line.startswith(" "):
            name = m.group(1)
    if not pipelines:
        sys.exit("no Halide profiler report on stdin: run with HL_JIT_TARGET=host-profile")
    for name, p in pipelines.items():
        print(f"{name}: {p['runs']} calls, {p['ms'] / p['runs']:.2f} ms per call, {p['samples']} samples\n")
        print("| Func | share of time | buffer |")
        print("|---|---:|---:|")
        for f, ms in sorted(p["funcs"].items(), key=lambda kv: -kv[1]):
            if ms == 0 and f not in p["peak"]:
                continue
            buf = f"{p['peak'][f] / 2**20:.1f} MiB" if f in p["peak"] else ""
            print(f"| `{f}` | {100 * ms / p['ms']:.1f}% | {buf} |")
        print()


if __name__ == "__main__":
    main()
