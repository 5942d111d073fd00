#!/usr/bin/env python3
"""Turns the Google Benchmark JSON files in bench/results/ into the tables
and plots of docs/benchmarks.md (between the report markers; the rest of
the page, e.g. the memory section, is kept) and docs/img/*.png.

    ~/.cache/segtile/venv/bin/python bench/report.py [--results bench/results] [--docs docs]

Suites and files: machine_peak.json, layers.json, peers.json, train_step.json,
scale.json
(bench/run_all.sh writes them); a suite run in parts (--benchmark_filter)
may write <suite>_<part>.json files instead, which are merged. A missing
suite leaves its section out.
"""
import argparse
import glob
import json
import os
import platform
import re
import subprocess
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

BEGIN = "<!-- bench/report.py: begin (generated, edit the script instead) -->"
END = "<!-- bench/report.py: end -->"


def truncated_json(text):
    """The finished benchmarks of a file whose writer was stopped, or None."""
    end = text.rfind("\n    }")
    while end > 0:
        try:
            return json.loads(text[: end + 6] + "\n  ]\n}\n")
        except json.JSONDecodeError:
            end = text.rfind("\n    }", 0, end)
    return None


def load_suite(results, suite, repair=False):
    """The suite's JSON files merged (benchmarks in file order, a later file's row replacing an earlier one of
    the same name), and their names and contexts."""
    paths = sorted(glob.glob(os.path.join(results, f"{suite}.json")) +
                   glob.glob(os.path.join(results, f"{suite}_*.json")))
    if not paths:
        return None, []
    merged, runs = {"context": None, "benchmarks": []}, []
    for path in paths:
        with open(path) as f:
            text = f.read()
        try:
            d = json.loads(text)
        except json.JSONDecodeError:
            # Google Benchmark writes its file as it goes: an interrupted suite
            # leaves the finished benchmarks followed by an unclosed list.
            d = truncated_json(text)
            if d is None:
                print(f"report.py: skipping {path}: not JSON")
                continue
            d["context"]["interrupted"] = True
            print(f"report.py: {path} is an interrupted run: {len(d['benchmarks'])} benchmarks finished")
            if repair:
                with open(path, "w") as f:
                    json.dump(d, f, indent=2)
        merged["context"] = merged["context"] or d["context"]
        # A configuration rerun in a later file (in name order) replaces
        # the earlier row where it stood.
        at = {b["name"]: i for i, b in enumerate(merged["benchmarks"])}
        for b in d["benchmarks"]:
            if b["name"] in at:
                merged["benchmarks"][at[b["name"]]] = b
            else:
                at[b["name"]] = len(merged["benchmarks"])
                merged["benchmarks"].append(b)
        runs.append((os.path.basename(path), d))
    return (merged if runs else None), runs


def rows(doc):
    return [b for b in doc["benchmarks"] if b.get("run_type", "iteration") == "iteration"] if doc else []


def gib(b):
    return f"{b / 2**30:.2f} GiB" if b >= 2**30 else f"{b / 2**20:.1f} MiB"


def num(x, digits=1):
    return f"{x:.{digits}f}"


def failed(b):
    return "FAILED" in b.get("label", "")


def machine():
    model = cores = ""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            k, _, v = line.partition(":")
            if k.strip() == "Model name":
                model = v.strip()
            if k.strip() == "CPU(s)":
                cores = v.strip()
    except OSError:
        pass
    mem = ""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem = f"{int(line.split()[1]) / 2**20:.0f} GiB"
    return f"{model}, {cores} CPUs, {mem} memory, {platform.system()} {platform.release()}"


def context_line(doc, name):
    c = doc["context"]
    line = f"`{name}`: {c.get('date', '?')}, load average {', '.join(num(x, 2) for x in c.get('load_avg', []))}"
    # Sessions run on different hosts: the CPU (torch_step.py records it),
    # else Google Benchmark's clock and L2, tell a file's host apart.
    host = [c["cpu"]] if c.get("cpu") else []
    if c.get("mhz_per_cpu"):
        host.append(f"{c['mhz_per_cpu']} MHz")
    l2 = [x["size"] for x in c.get("caches", []) if x.get("level") == 2]
    if l2:
        host.append(f"L2 {l2[0] // 1024} KiB per core")
    if host:
        line += f"; host: {', '.join(host)}"
    if c.get("interrupted"):
        line += f" (interrupted by hand after {len(doc['benchmarks'])} benchmarks: the rest did not run)"
    return line


def peak_section(doc, out):
    out.append("## Machine peak (FMA throughput)\n")
    out.append("16 independent FMA chains per thread on full vector registers, one pinned thread per CPU "
               "(`bench/fma_peak.cpp`; the disassembly check is in its comment). Best of three half-second runs.\n")
    out.append("| precision | threads | ISA | GFLOP/s | GFLOP/s per thread |")
    out.append("|---|---:|---|---:|---:|")
    for b in rows(doc):
        isa, prec = b["label"].split()
        out.append(f"| {prec} | {int(b['threads'])} | {isa} | {num(b['gflops'])} | {num(b['gflops_per_thread'])} |")
    out.append("")


def layer_name(b):
    # BM_Layer/<case>/<part>/<schedule>
    parts = b["name"].split("/")
    return parts[1], parts[2], parts[3]


def layers_section(doc, out, img_dir):
    rs = rows(doc)
    yard = [b for b in rs if b.get("yardstick") == 1]
    if yard:
        out.append("## Yardstick: backward of conv 3×3 64→64 + relu at 128×128 (issue 4)\n")
        out.append("One kernel: recomputed forward, input gradient and weight gradient (3.63 GFLOP useful), "
                   "as segtile's CPU schedule and Halide's autoschedulers schedule it.\n")
        out.append("| schedule | GFLOP/s | fraction of peak | ms per call | compile s |")
        out.append("|---|---:|---:|---:|---:|")
        for b in yard:
            sched = layer_name(b)[2]
            if failed(b):
                out.append(f"| {sched} | — | — | — | — ({b['label']}) |")
                continue
            out.append(f"| {sched} | {num(b['gflops'])} | {num(100 * b['fraction_of_peak'])}% | "
                       f"{num(1e3 * b['seconds'])} | {num(b['compile_seconds'])} |")
        out.append("")
    rest = [b for b in rs if b.get("yardstick") != 1]
    if not rest:
        return
    out.append("## Layers: forward and backward kernels (segtile CPU schedule)\n")
    out.append("Single-layer models, one tile = the whole image, batch 1, float32. GFLOP/s counts useful FLOPs "
               "(`spec/cost.h`); GB/s counts the bytes of every buffer the kernel takes (a lower bound on its "
               "traffic). Fastest of at least three calls.\n")
    out.append("| layer | kernel | GFLOP/s | fraction of peak | GB/s | ms per call | compile s |")
    out.append("|---|---|---:|---:|---:|---:|---:|")
    for b in rest:
        case, part, _ = layer_name(b)
        if failed(b):
            out.append(f"| {case} | {part} | — | — | — | — | {b['label']} |")
            continue
        out.append(f"| {case} | {part} | {num(b['gflops'], 2)} | {num(100 * b['fraction_of_peak'], 2)}% | "
                   f"{num(b['gbytes_per_s'], 2)} | {num(1e3 * b['seconds'], 2)} | {num(b['compile_seconds'])} |")
    out.append("")
    # Bar chart: GFLOP/s per layer, one bar per kernel part.
    cases = []
    by = defaultdict(dict)
    for b in rest:
        if failed(b):
            continue
        case, part, _ = layer_name(b)
        if case not in cases:
            cases.append(case)
        by[part][case] = b["gflops"]
    partsl = [p for p in ["forward", "input_grad", "weight_grad", "backward"] if p in by]
    fig, ax = plt.subplots(figsize=(11, 5))
    w = 0.8 / max(len(partsl), 1)
    for i, p in enumerate(partsl):
        xs = [k + i * w for k in range(len(cases))]
        ax.bar(xs, [by[p].get(c, 0) for c in cases], w, label=p)
    ax.set_xticks([k + 0.4 - w / 2 for k in range(len(cases))])
    ax.set_xticklabels(cases, rotation=35, ha="right", fontsize=8)
    ax.set_ylabel("useful GFLOP/s")
    ax.set_title("Per-layer kernels, segtile CPU schedule")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(img_dir, "layers_gflops.png"), dpi=110)
    plt.close(fig)
    out.append("![per-layer GFLOP/s](img/layers_gflops.png)\n")


# Columns train_step_bench adds for tiled runs: (header, counter, format).
PLAN_COLUMNS = [("first step s", "seconds_first_step", lambda v: num(v, 2)), ("predicted peak", "predicted_peak_bytes", gib), ("checkpoint store", "checkpoint_bytes", gib),
                ("recompute", "recompute_factor", lambda v: num(v, 2)), ("segments", "segments", lambda v: num(v, 0)),
                ("plan s", "plan_seconds", num)]


def step_table(rs, out, key_cols, key_fn, extra=()):
    # model, then size as a number; the schedule or cap keeps its run order
    order = {id(b): i for i, b in enumerate(rs)}
    rs = sorted(rs, key=lambda b: (key_fn(b)[0], int(key_fn(b)[1]), order[id(b)]))
    out.append("| " + " | ".join(key_cols) + " | s/step | GFLOP/s | fraction of peak | peak working memory "
               "| high-water mark | compile s |" + "".join(f" {h} |" for h, _, _ in extra))
    out.append("|" + "---|" * len(key_cols) + "---:|---:|---:|---:|---:|---:|" + "---:|" * len(extra))
    for b in rs:
        keys = key_fn(b)
        if failed(b):
            reason = b["label"].split("FAILED:", 1)[1].strip()
            reason = reason if len(reason) < 320 else reason[:317] + "..."
            out.append("| " + " | ".join(keys) + f" | failed: {reason} | | | | | |" + " |" * len(extra))
            continue
        out.append("| " + " | ".join(keys) + f" | {num(b['seconds_per_step'], 2)} | {num(b['gflops'])} | "
                   f"{num(100 * b['fraction_of_peak'])}% | {gib(b['peak_working_bytes'])} | "
                   f"{gib(b['high_water_mark_bytes'])} | {num(b['compile_seconds'])} |" +
                   "".join(f" {fmt(b[c])} |" if c in b else " — |" for _, c, fmt in extra))
    out.append("")


def plot_lines(series, ylabel, title, path, logy=False):
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, pts in sorted(series.items()):
        pts = sorted(pts)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
    ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel("image size (pixels per side)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parse_step(b, pattern):
    m = re.match(pattern, b["name"])
    return m.groups() if m else None


def steps_section(peers, train, out, img_dir):
    times, mems = defaultdict(list), defaultdict(list)
    if peers:
        rs = rows(peers)
        out.append("## Training step: segtile vs Halide's autoschedulers, untiled and under caps\n")
        out.append("Batch 1, float32, one step = forward, loss, every gradient (`JitKernel` of the untiled "
                   "head). Fastest of 2 to 10 steps (they repeat until 2 s are spent; the first allocates every buffer "
                   "fresh, the later ones reuse them from the ledger's block cache, as a training run's steps do). "
                   "Adams2019 runs its greedy search (beam_size=1): its default beam search needs minutes "
                   "for a single conv layer here. Rows `segtile_cpu, cap 1/4` and `1/16` (issue 4) run the "
                   "planner's tiled plan under that fraction of segtile's untiled peak measured just before, in "
                   "the same run; the last column divides each row's measured peak by that untiled peak, so a "
                   "row fits a cap of 1/4 where it is at most 25%. The peers have no cap to obey: their rows "
                   "show how far over one they are.\n")

        def key(b):
            model, size, sched = parse_step(b, r"BM_PeerStep/([^/]+)/size:(\d+)/([^/]+)")
            m = re.match(r"(.+)_cap_(\d+)_(\d+)$", sched)
            return [model, size, f"{m.group(1)}, cap {m.group(2)}/{m.group(3)}" if m else sched]

        untiled = {tuple(key(b)[:2]): b["peak_working_bytes"] for b in rs
                   if not failed(b) and key(b)[2] == "segtile_cpu"}
        for b in rs:
            u = untiled.get(tuple(key(b)[:2]))
            if u and not failed(b):
                b["of_untiled_peak"] = b["peak_working_bytes"] / u
        cap_columns = [c for c in PLAN_COLUMNS if c[1] in ("predicted_peak_bytes", "checkpoint_bytes",
                                                             "recompute_factor", "segments")]
        step_table(rs, out, ["model", "size", "schedule"], key,
                   cap_columns + [("of segtile's untiled peak", "of_untiled_peak", lambda v: f"{100 * v:.0f}%")])
        for b in rs:
            if failed(b):
                continue
            model, size, sched = key(b)
            times[f"{model} {sched} (peers_bench)"].append((int(size), b["seconds_per_step"]))
            mems[f"{model} {sched} (peers_bench)"].append((int(size), b["peak_working_bytes"] / 2**20))
    if train:
        rs = rows(train)
        out.append("## Training step of VGG16 and Darknet19 by image size (segtile CPU schedule)\n")
        out.append("Caps are fractions of the untiled step's peak working memory; `none` is the untiled step. "
                   "Capped runs run the planner's plan for that cap (issue 4); the untiled step has no plan "
                   "(—), no checkpoint store and a recompute factor of 1. After an untimed step "
                   "(capped runs), the ledger's block cache is emptied and at least two steps run: "
                   "`first step s` is the first, whose buffers all come fresh from the system (as an epoch's "
                   "first step: every page faults in); s/step is the fastest later one (the second for capped "
                   "runs; `none` repeats until 2 s are spent), whose buffers come from the cache, as every later "
                   "step of an epoch. Peaks cover all of them. Runs before 2026-12-03 timed the first only "
                   "where a step took over 2 s. The high-water mark is the process's (the JIT compiler's memory "
                   "included); the steps' high-water mark is reset once the kernels are made (since 2026-12-07). "
                   "`1/8-mapped` runs under the same cap with its checkpoint store in memory-mapped files "
                   "(`--checkpoint-dir`; each row of tiles' pages leave the process after the row) and its "
                   "kernels loaded from the kernel cache, which a process before it filled: the whole memory of "
                   "a second `segtile train --checkpoint-dir` run. Since 2026-12-07 (evening) its plan is the "
                   "planner's for mapped checkpoints, which counts each row of tiles' resident checkpoint pages "
                   "against the cap (docs/planner.md); before, it ran the in-memory 1/8 plan.\n")

        def key(b):
            model, size, cap = parse_step(b, r"BM_TrainStep/([^/]+)/size:(\d+)/cap:([^/]+)")
            return [model, size, cap.replace("_", "/")]

        step_table(rs, out, ["model", "size", "cap"], key, PLAN_COLUMNS + [
            ("steps' high-water mark", "step_high_water_mark_bytes", lambda v: gib(v) if v >= 0 else "—")])
        for b in rs:
            if failed(b):
                continue
            model, size, cap = key(b)
            name = f"{model} segtile_cpu, cap {cap} (train_step_bench)"
            times[name] = [p for p in times[name] if p[0] != int(size)] + [(int(size), b["seconds_per_step"])]
            mems[name] = [p for p in mems[name] if p[0] != int(size)] + [(int(size), b["peak_working_bytes"] / 2**20)]
    if times:
        plot_lines(times, "seconds per step", "Training step time", os.path.join(img_dir, "step_seconds.png"), True)
        plot_lines(mems, "peak working memory (MiB)", "Training step peak working memory",
                   os.path.join(img_dir, "step_peak_memory.png"), True)
        out.append("![seconds per step](img/step_seconds.png) ![peak working memory](img/step_peak_memory.png)\n")


def scale_section(doc, out):
    out.append("## Scale run: one training step far beyond memory (issue 6)\n")
    out.append("`scale_bench`: one step (not the best of several: the first touch of every buffer is included), "
               "the planner's plan under an absolute working-memory cap, checkpoints in memory-mapped files "
               "(`--checkpoint_dir`). The high-water mark counts those files' pages resident at one time (since 3a62c45 "
               "the executor drops them after each segment, since 2026-12-07 after each row of tiles; before, the "
               "whole store's). Runs named `mapped_plan` plan with those pages counted against the cap. \"in kernels\" is the time "
               "inside kernel calls, which read and write the checkpoint files in place (their page faults included); "
               "the rest is the executor's (window copies, gradient adds). Disk read and written: what the step made "
               "the kernel read from or write to storage (`/proc/self/io`). Stalled: wall time in which every running "
               "task of the machine waited on storage, or on memory reclaim (`/proc/pressure`, \"full\").\n")

    def key(b):
        model, size, cap = parse_step(b, r"BM_ScaleStep/([^/]+)/size:(\d+)/cap:([^/]+)")
        return [model, size, cap]

    # Where the step's time and pages went (counters since 2026-12-05; "—" in older files)
    def io_bytes(v):
        return gib(v) if v >= 0 else "—"
    io_columns = [("in kernels s", "kernel_seconds_per_step", num),
                  ("major faults", "major_faults_per_step", lambda v: num(v, 0)),
                  ("disk read", "storage_read_bytes_per_step", io_bytes),
                  ("disk written", "storage_write_bytes_per_step", io_bytes),
                  ("stalled on I/O s", "io_stall_seconds_per_step", lambda v: num(v) if v >= 0 else "—"),
                  ("stalled on reclaim s", "memory_stall_seconds_per_step", lambda v: num(v) if v >= 0 else "—")]
    step_table(rows(doc), out, ["model", "size", "cap"], key, PLAN_COLUMNS + io_columns)


def torch_section(torch_doc, train, out):
    out.append("## Against PyTorch on the same CPU: VGG16 training step (issue 42)\n")
    out.append("`bench/torch_step.py`: torchvision's vgg16().features, global average pooling and a 2-class linear "
               "layer in PyTorch, batch 1, float32, a step being forward, backward and an SGD update, with "
               "as many threads as segtile (`HL_NUM_THREADS`, else every CPU); eager NCHW, channels_last, and "
               "checkpoint_sequential over 4 segments; each in its own process, the best of at least two steps. "
               "segtile's columns are train_step_bench's rows of the same model and size (untiled, and the plan "
               "under 1/8 of the untiled peak, and the plan under the same cap with its checkpoints in "
               "memory-mapped files and its kernels from a warm kernel cache). A ratio above 1 means segtile is faster. The last column "
               "divides the mapped run's process high-water mark by PyTorch's lowest.\n")
    seg = {}
    for b in rows(train):
        m = parse_step(b, r"BM_TrainStep/vgg16/size:(\d+)/cap:([^/]+)")
        if m and not failed(b):
            seg[(int(m[0]), m[1].replace("_", "/"))] = b
    by = defaultdict(dict)
    for b in rows(torch_doc):
        m = parse_step(b, r"BM_TorchStep/vgg16/size:(\d+)/([a-z_0-9]+)")
        if m:
            by[int(m[0])][m[1]] = b
    modes = ["eager", "channels_last", "checkpoint_4"]
    out.append("| size | segtile untiled s | segtile 1/8 s | segtile 1/8-mapped s | " +
               " | ".join(f"PyTorch {m} s" for m in modes) +
               " | fastest PyTorch / segtile untiled | / segtile 1/8 | / segtile 1/8-mapped | high-water mark: "
               "segtile untiled | segtile 1/8 | segtile 1/8-mapped | " + " | ".join(f"PyTorch {m}" for m in modes) +
               " | segtile 1/8-mapped / lowest PyTorch |")
    out.append("|---:|" + "---:|" * (3 + len(modes) + 3 + 3 + len(modes) + 1))

    def sec(b):
        return "failed" if b is None or failed(b) else num(b["seconds_per_step"], 2)

    def hwm(b):
        return "—" if b is None or failed(b) else gib(b["high_water_mark_bytes"])
    for size in sorted(by):
        t = by[size]
        ok = [b["seconds_per_step"] for b in t.values() if not failed(b)]
        best = min(ok) if ok else None
        u, c, f = seg.get((size, "none")), seg.get((size, "1/8")), seg.get((size, "1/8-mapped"))

        def ratio(b):
            return "—" if best is None or b is None or failed(b) else f"{best / b['seconds_per_step']:.2f}"
        lowest = min((b["high_water_mark_bytes"] for b in t.values() if not failed(b)), default=None)
        share = "—" if lowest is None or f is None or failed(f) else f"{f['high_water_mark_bytes'] / lowest:.2f}"
        out.append(f"| {size} | {sec(u)} | {sec(c)} | {sec(f)} | " + " | ".join(sec(t.get(m)) for m in modes) +
                   f" | {ratio(u)} | {ratio(c)} | {ratio(f)} | {hwm(u)} | {hwm(c)} | {hwm(f)} | " +
                   " | ".join(hwm(t.get(m)) for m in modes) + f" | {share} |")
    out.append("")


def kernel_cache_section(doc, out):
    out.append("## Kernel preparation: JIT, cold kernel cache, warm kernel cache (issue 42)\n")
    out.append("`kernel_cache_bench`: a plan's kernels (float32, training: no image gradient) made ready three ways, "
               "each in its own process: JIT-compiled in memory one after another (every run before the kernel "
               "cache; `SEGTILE_KERNEL_CACHE=off`), compiled into an empty kernel cache in parallel on every core "
               "(`docs/formats.md`, Kernel cache), and loaded from the filled cache (every later run).\n")
    out.append("| model | cuts | kernels | JIT s | cold cache s | warm cache s | JIT / cold | JIT / warm "
               "| high-water mark JIT | cold | warm |")
    out.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    by = {}
    for b in rows(doc):
        m = re.match(r"BM_KernelPrep/([^/]+)/cuts:([^/]+)/([a-z_]+)", b["name"])
        if m:
            by.setdefault((m.group(1), m.group(2)), {})[m.group(3)] = b
    for (model, cuts), r in by.items():
        def sec(how):
            b = r.get(how)
            return "FAILED" if b is None or failed(b) else num(b["seconds"], 3 if b["seconds"] < 1 else 1)
        def hwm(how):
            b = r.get(how)
            return "—" if b is None or failed(b) else gib(b["high_water_mark_bytes"])
        def ratio(a, c):
            if any(r.get(h) is None or failed(r[h]) for h in (a, c)):
                return "—"
            return f"{r[a]['seconds'] / r[c]['seconds']:.1f}x" if r[c]["seconds"] > 0 else "—"
        k = next((int(b["kernels"]) for b in r.values() if "kernels" in b), 0)
        out.append(f"| {model} | {cuts.replace('_', ',') if cuts != 'untiled' else 'untiled'} | {k} | {sec('jit')} "
                   f"| {sec('cache_cold')} | {sec('cache_warm')} | {ratio('jit', 'cache_cold')} "
                   f"| {ratio('jit', 'cache_warm')} | {hwm('jit')} | {hwm('cache_cold')} | {hwm('cache_warm')} |")
    out.append("")


def main():
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--results", default=os.path.join(here, "results"))
    ap.add_argument("--docs", default=os.path.join(here, "..", "docs"))
    ap.add_argument("--repair", action="store_true",
                    help="rewrite the files of interrupted runs as valid JSON (their finished benchmarks)")
    a = ap.parse_args()
    img_dir = os.path.join(a.docs, "img")
    os.makedirs(img_dir, exist_ok=True)
    docs, runs = {}, []
    for n in ["machine_peak", "layers", "peers", "train_step", "scale", "kernel_cache", "torch"]:
        docs[n], r = load_suite(a.results, n, a.repair)
        runs += r
    out = [BEGIN, ""]
    out.append(f"Report written on: {machine()}. The runs below may come from other hosts (each run's line names its "
               "own). Generated by `bench/report.py` from `bench/results/*.json`, written by\n")
    out.append("```sh\nbench/run_all.sh            # builds, runs every suite below, then this report\n"
               "bench/run_all.sh --long     # adds the long sizes (hours)\n```\n")
    out.append("which runs, in the build folder that `scripts/build.sh` prints:\n")
    out.append("```sh\nmachine_peak_bench --benchmark_out=bench/results/machine_peak.json --benchmark_out_format=json\n"
               "layer_bench      --peak_gflops=P --benchmark_out=bench/results/layers.json --benchmark_out_format=json\n"
               "peers_bench      --peak_gflops=P --benchmark_out=bench/results/peers.json --benchmark_out_format=json\n"
               "train_step_bench --peak_gflops=P --benchmark_out=bench/results/train_step.json "
               "--benchmark_out_format=json\n"
               "scale_bench      --peak_gflops=P --benchmark_out=bench/results/scale.json --benchmark_out_format=json"
               "   # --long only\n"
               "kernel_cache_bench --benchmark_out=bench/results/kernel_cache.json --benchmark_out_format=json\n"
               "python bench/torch_step.py --out bench/results/torch.json   # skipped without torch in the venv\n```\n")
    ps = sorted({b["peak_gflops"] for d in docs.values() if d for b in rows(d) if "peak_gflops" in b})
    out.append("P is the float32 all-core FMA peak (machine_peak_bench's `BM_FmaPeak/bits:32/threads:0`); every "
               "\"fraction of peak\" divides useful GFLOP/s by it. "
               + (f"These runs used P = {', '.join(num(p) for p in ps)} GFLOP/s (counter `peak_gflops`). " if ps else "")
               + "Runs (date, load average when each file's suite started):\n")
    for name, d in runs:
        out.append(f"- {context_line(d, name)}")
    out.append("")
    # A 1-minute load average above the core count means other jobs shared
    # the cores while a suite ran: say so instead of presenting clean numbers.
    loads = [float(d["context"]["load_avg"][0]) for _, d in runs if d.get("context", {}).get("load_avg")]
    cores = os.cpu_count() or 1
    if loads and max(loads) > cores:
        out.append(f"**Some suites ran while other jobs shared the {cores} cores** (1-minute load average up to "
                   f"{max(loads):.1f}): their timings are pessimistic and are to be rerun. ")
    out.append("The host's speed also changes over hours (the FMA peak above has measured from 245 to 531 GFLOP/s "
               "from one session to the next): compare figures from the same run only, as the fractions of peak do. Each "
               "configuration ran in its own process (`bench/isolated_run.h`), so the high-water marks are per "
               "configuration; they include the JIT compiler's own memory.\n")
    if docs["machine_peak"]:
        peak_section(docs["machine_peak"], out)
    if docs["layers"]:
        layers_section(docs["layers"], out, img_dir)
    steps_section(docs["peers"], docs["train_step"], out, img_dir)
    if docs["scale"]:
        scale_section(docs["scale"], out)
    if docs["torch"]:
        torch_section(docs["torch"], docs["train_step"], out)
    if docs["kernel_cache"]:
        kernel_cache_section(docs["kernel_cache"], out)
    out.append(END)
    generated = "\n".join(out) + "\n"

    path = os.path.join(a.docs, "benchmarks.md")
    text = open(path).read() if os.path.exists(path) else "# Benchmarks\n"
    if BEGIN in text and END in text:
        pre, rest = text.split(BEGIN, 1)
        post = rest.split(END, 1)[1].lstrip("\n")
        text = pre + generated + "\n" + post
    else:  # first run: after the title, before the hand-written sections
        lines = text.split("\n", 1)
        text = lines[0] + "\n\n" + generated + "\n" + (lines[1].lstrip("\n") if len(lines) > 1 else "")
    with open(path, "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
