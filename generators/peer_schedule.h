// Schedules of segtile's kernel pipelines by Halide's own autoschedulers
// (Li2018, Adams2019, Mullapudi2016, loaded as plugins from the Halide
// package), so benchmarks can run the same kernels the way a Halide user
// would schedule them, side by side with segtile's schedule.
//
// Autoschedulers need estimates of every input and output. A JIT kernel
// takes its sizes at run time, so the estimates describe one call: the
// image of `width` x `height` pixels (batch `batch`) computed as one tile,
// i.e. every buffer is its whole tensor. That is the untiled training step
// (the head of the untiled layout) or a single-tile segment kernel.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "Halide.h"
#include "spec/kernel_signature.h"

namespace segtile {

struct PeerSchedule {
    std::string autoscheduler;  // "Li2018", "Adams2019" or "Mullapudi2016"
    int64_t width = 0, height = 0;
    int64_t batch = 1;
    int parallelism = 0;  // 0: the machine's hardware threads
    std::map<std::string, std::string> extra;  // further autoscheduler parameters, e.g. {"beam_size", "1"}
};

// Sets the estimates of the kernel's inputs (found by name in the Funcs'
// definitions) and outputs (`outputs` in the order of the output entries of
// `signature`), loads the autoscheduler's plugin and applies it. Throws
// Halide::Error with the autoscheduler's message.
void apply_peer_schedule(const Model &m, const std::vector<KernelArg> &signature,
                         const std::vector<Halide::Func> &outputs, const PeerSchedule &peer,
                         const Halide::Target &target);

}  // namespace segtile
