#!/usr/bin/env python3
"""The paper's baselines on the same GPU as segtile's CUDA kernels: one
training step of the PyTorch twins of vgg16 / darknet19 (docs/models.md),
batch 1, float32, untiled or with torch.utils.checkpoint.checkpoint_sequential
over the feature trunk, under a device-memory cap set with
torch.cuda.set_per_process_memory_fraction. Writes one JSON object; an out
of memory is a result ("status": "oom"), not a failure.

    pytorch_baseline.py --model vgg16 --size 4096 --mode untiled --cap-gib 11 --out r.json
"""
import argparse
import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint_sequential


class VGG16(nn.Module):
    cfg = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]

    def __init__(self, classes=2):
        super().__init__()
        layers, c = [], 3
        for v in self.cfg:
            if v == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                layers += [nn.Conv2d(c, v, 3, padding=1), nn.ReLU(inplace=True)]
                c = v
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(512, classes)

    def head(self, x):
        return self.classifier(x.mean((2, 3)))


class Darknet19(nn.Module):
    cfg = [(32, 3), "M", (64, 3), "M", (128, 3), (64, 1), (128, 3), "M",
           (256, 3), (128, 1), (256, 3), "M",
           (512, 3), (256, 1), (512, 3), (256, 1), (512, 3), "M",
           (1024, 3), (512, 1), (1024, 3), (512, 1), (1024, 3)]

    def __init__(self, classes=2):
        super().__init__()
        layers, c = [], 3
        for v in self.cfg:
            if v == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                out, k = v
                layers += [nn.Conv2d(c, out, k, padding=k // 2, bias=False),
                           nn.BatchNorm2d(out), nn.LeakyReLU(0.1)]
                c = out
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Conv2d(1024, classes, 1)

    def head(self, x):
        return self.classifier(x).mean((2, 3))


def step(model, image, label, mode, segments):
    model.zero_grad(set_to_none=True)
    if mode == "checkpoint":
        features = checkpoint_sequential(model.features, segments, image, use_reentrant=False)
    else:
        features = model.features(image)
    loss = F.cross_entropy(model.head(features), label)
    loss.backward()
    torch.cuda.synchronize()
    return loss.item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["vgg16", "darknet19"], required=True)
    ap.add_argument("--size", type=int, required=True)
    ap.add_argument("--mode", choices=["untiled", "checkpoint"], required=True)
    ap.add_argument("--segments", type=int, default=4, help="checkpoint_sequential segments")
    ap.add_argument("--cap-gib", type=float, default=11.0)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    result = {"tool": "pytorch", "model": a.model, "size": a.size, "mode": a.mode, "cap_gib": a.cap_gib,
              "torch": torch.__version__}
    if a.mode == "checkpoint":
        result["segments"] = a.segments
    try:
        # An explicit index: set_per_process_memory_fraction refuses a bare
        # "cuda" (torch 2.11 on the H200, 2026-12-04).
        dev = torch.device("cuda", torch.cuda.current_device())
        total = torch.cuda.get_device_properties(dev).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, a.cap_gib * 2**30 / total), dev)
        result["device"] = torch.cuda.get_device_name(dev)
        torch.manual_seed(1)
        model = (VGG16() if a.model == "vgg16" else Darknet19()).to(dev)
        model.eval()  # frozen batch norm, as in segtile; gradients still flow
        label = torch.tensor([1], device=dev)
        step(model, torch.randn(1, 3, 64, 64, device=dev), label, a.mode, a.segments)  # warm-up
        torch.cuda.reset_peak_memory_stats(dev)
        image = torch.randn(1, 3, a.size, a.size, device=dev)
        t0 = time.perf_counter()
        loss = step(model, image, label, a.mode, a.segments)
        result.update(status="ok", seconds=time.perf_counter() - t0, loss=loss,
                      peak_allocated_bytes=torch.cuda.max_memory_allocated(dev))
    except torch.cuda.OutOfMemoryError as e:
        result.update(status="oom", error=str(e).splitlines()[0])
    except RuntimeError as e:  # e.g. cuDNN or indexing limits on huge tensors
        result.update(status="oom" if "out of memory" in str(e) else "error", error=str(e).splitlines()[0])
    with open(a.out, "w") as f:
        json.dump(result, f)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
