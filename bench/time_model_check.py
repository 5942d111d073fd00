#!/usr/bin/env python3
"""The planner's time model against a measured step, per segment.

Reads the stderr of `scale_bench --warm_up` (its plan table, then a line per
segment pass of each step) and prints, for the last step, each segment's
measured seconds against the plan's prediction scaled by the one factor that
fits best (geometric mean of the ratios), with the spread of the ratios:

    scale_bench --model=darknet19 --size=1024 --cap=800MiB --warm_up 2> step.log
    bench/time_model_check.py step.log [more.log ...]

The scale factor is how far the rates (default or calibrated) are from this
host's speed; the spread is what the model gets wrong segment by segment.
"""
import math
import re
import sys


def check(path):
    lines = open(path).read().splitlines()
    names, predicted = [], []
    for line in lines:
        m = re.match(r"^(\d+)\s+(\S+ \.\. \S+)\s+.*\s([\d.]+)$", line)
        if m:
            names.append(m.group(2))
            predicted.append(float(m.group(3)))
    passes = [l for l in lines if re.match(r"segment \d+ (forward|backward)", l)]
    if not names or len(passes) < 2 * len(names):
        sys.exit(f"{path}: no plan table or no complete step (run scale_bench with --warm_up)")
    measured = [0.0] * len(names)
    for line in passes[-2 * len(names):]:
        m = re.match(r"segment (\d+) \w+: ([\d.]+) s", line)
        measured[int(m.group(1))] += float(m.group(2))
    # Segments predicted at under 0.5% of the step (a head-like last one)
    # are shown but not scored.
    keep = [i for i, p in enumerate(predicted) if p > 0.005 * sum(predicted)]
    scale = math.exp(sum(math.log(measured[i] / predicted[i]) for i in keep) / len(keep))
    ratios = {i: measured[i] / (scale * predicted[i]) for i in keep}
    errors = [abs(r - 1) for r in ratios.values()]
    print(f"{path}: predicted {sum(predicted):.2f} s, measured {sum(measured):.2f} s per step; "
          f"scale {scale:.3f}; measured/predicted per segment {min(ratios.values()):.2f}-"
          f"{max(ratios.values()):.2f}, mean error {100 * sum(errors) / len(errors):.0f}%")
    for i, name in enumerate(names):
        r = f"{ratios[i]:5.2f}" if i in ratios else "    -"
        print(f"  {name:20s} predicted {scale * predicted[i]:7.3f} s  measured {measured[i]:7.3f} s  ratio {r}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for p in sys.argv[1:]:
        check(p)
