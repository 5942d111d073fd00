#!/usr/bin/env python3
"""PyTorch's VGG16 training step on this CPU, to set beside segtile's (issue 42).

The network of models/vgg16.json: torchvision's vgg16().features
(configuration D, written out here so torchvision is not needed), global
average pooling and a 2-class linear layer; batch 1, float32, softmax cross
entropy; a step is forward, backward and an SGD update. Three ways:

  eager          NCHW, PyTorch's default
  channels_last  NHWC memory format (oneDNN's preferred layout on the CPU)
  checkpoint_4   torch.utils.checkpoint.checkpoint_sequential over 4 segments
                 (PyTorch's way to trade compute for memory)

Each configuration runs in its own process, so its high-water mark (peak
RSS) is its own. The seconds are the best of at least two steps (and up
to ten seconds of steps), the first included, as train_step_bench counts
segtile's. Threads: HL_NUM_THREADS, else every CPU, as segtile uses.

  torch_step.py --out bench/results/torch.json [--long]

Writes Google Benchmark's JSON layout (bench/report.py reads it beside
train_step.json). Without torch it says so and writes nothing.
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import time

CFG_D = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]
MODES = ["eager", "channels_last", "checkpoint_4"]


def threads():
    v = os.environ.get("HL_NUM_THREADS", "")
    return max(1, int(v)) if v.isdigit() else os.cpu_count() or 1


def one(size, mode, min_seconds):
    import torch
    from torch import nn
    from torch.utils.checkpoint import checkpoint_sequential

    torch.set_num_threads(threads())
    torch.manual_seed(0)
    layers, c = [], 3
    for v in CFG_D:
        if v == "M":
            layers.append(nn.MaxPool2d(2, 2))
        else:
            layers += [nn.Conv2d(c, v, 3, padding=1), nn.ReLU(inplace=mode != "checkpoint_4")]
            c = v
    net = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 2))
    x = torch.randn(1, 3, size, size)
    y = torch.tensor([1])
    if mode == "channels_last":
        net = net.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=True)
        if mode == "checkpoint_4":
            out = checkpoint_sequential(net, 4, x.requires_grad_(False), use_reentrant=False)
        else:
            out = net(x)
        loss_fn(out, y).backward()
        opt.step()

    times = []
    while len(times) < 2 or (sum(times) < min_seconds and len(times) < 20):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return {
        "seconds_per_step": min(times),
        "seconds_per_step_mean": sum(times) / len(times),
        "seconds_first_step": times[0],
        "steps": len(times),
        "threads": threads(),
        "high_water_mark_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "torch_version": torch.__version__,
    }


def cpu_model():
    """The CPU's model name, as the segtile suites' runs are told apart by host."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--long", action="store_true", help="adds 2048x2048")
    ap.add_argument("--min_seconds", type=float, default=10)
    ap.add_argument("--sizes", help="comma-separated sizes instead of 256,512,1024 (e.g. 1024)")
    ap.add_argument("--one", nargs=2, metavar=("SIZE", "MODE"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print(json.dumps(one(int(a.one[0]), a.one[1], a.min_seconds)))
        return
    try:
        import torch  # noqa: F401
    except ImportError:
        print("torch_step.py: torch is not installed in this Python (pip install torch): "
              "the PyTorch comparison is skipped", file=sys.stderr)
        return
    sizes = [int(v) for v in a.sizes.split(",")] if a.sizes else [256, 512, 1024] + ([2048] if a.long else [])
    doc = {"context": {"date": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
                       "load_avg": list(os.getloadavg()), "executable": "bench/torch_step.py", "cpu": cpu_model()},
           "benchmarks": []}
    for size in sizes:
        for mode in MODES:
            name = f"BM_TorchStep/vgg16/size:{size}/{mode}"
            p = subprocess.run([sys.executable, __file__, "--out", a.out, "--one", str(size), mode,
                                "--min_seconds", str(a.min_seconds)], capture_output=True, text=True)
            b = {"name": name, "run_type": "iteration", "iterations": 1, "label": f"vgg16 {size} {mode}"}
            if p.returncode == 0:
                b.update(json.loads(p.stdout.strip().splitlines()[-1]))
            else:
                b["label"] += ": FAILED: " + (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1]
            print(f"{name}: {b.get('seconds_per_step', 'FAILED')} s per step, "
                  f"high-water mark {b.get('high_water_mark_bytes', 0) / 2**30:.2f} GiB", file=sys.stderr)
            doc["benchmarks"].append(b)
            with open(a.out, "w") as f:  # as it goes, like Google Benchmark
                json.dump(doc, f, indent=2)


if __name__ == "__main__":
    main()
