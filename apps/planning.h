// The program's side of planning: a plan for the user's model, image size
// and cap, with the exact kernel-memory model for the kernels it will JIT
// (the CPU schedule), or a plan file.
#pragma once

#include <string>

#include "autoscheduler/planner.h"

namespace segtile {

struct PlanOptions {
    int64_t width = 0, height = 0;
    int batch = 1;
    std::string memory_cap;      // "256MiB"; empty: no cap
    std::string checkpoint_cap;  // empty: no cap
    std::string optimizer = "adam";
    bool estimate = false;       // the analytic kernel memory only (no lowering)
    bool calibrate = false;      // measure this machine's rates first (and save them)
    std::string target = "cpu";  // "cuda": memory_cap caps device memory; kernels lowered with the GPU schedule
    bool image_gradient = false; // training needs the parameters' gradients only (PlanRequest)
    std::string cuts;            // "conv2,conv3": only these cuts (tiles still searched); empty: search cuts
    bool mapped_checkpoints = false;  // checkpoints in mapped files: the cap holds their resident pages (PlanRequest)
};

// Plans (printing what it does: lowering kernels takes seconds per segment).
// Throws PlanError (with the smallest feasible cap) or ModelError.
Plan plan_for(const Model &m, const PlanOptions &opt);

// Reads a plan file written by `segtile plan --json` for model m.
Plan read_plan_file(const std::string &path, const Model &m);

}  // namespace segtile
