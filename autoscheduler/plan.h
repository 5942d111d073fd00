// A plan is data: the cuts and a tile size per segment, with the
// predictions that chose them. JSON in and out; a table for people.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "spec/model.h"
#include "spec/tiling.h"

namespace segtile {

struct SegmentPlan {
    int first = 0, last = 0;        // layers
    TileSize tile;                  // on the segment's last layer's output
    int64_t tiles = 0;              // tiles per image
    int64_t window_width = 0, window_height = 0;  // input window of an interior tile
    double recompute = 1;           // FLOPs executed / FLOPs of the segment untiled (forward + backward)
    int64_t forward_bytes = 0;      // predicted working memory of a forward tile call (runtime + kernel)
    int64_t backward_bytes = 0;     // the same for a backward tile call; 0: not run (spec/segments.h backward_needed)
    int64_t kernel_bytes = 0;       // of which the backward kernel's own allocations
    // Mapped checkpoints (Plan::mapped_checkpoints): the most pages of
    // checkpoint rows one row of tiles holds resident, forward or backward;
    // outside forward_bytes and backward_bytes (the cap holds each call
    // with its own row's pages).
    int64_t resident_bytes = 0;
    bool exact = false;             // kernel memory from the lowered code (else the analytic estimate)
    double seconds = 0;             // predicted, per image
    // What the time model priced (per image, forward and backward): FLOPs
    // executed, activation elements read or written, bytes the executor
    // copies, kernel calls, and the trainable weights each backward call
    // passes over (weight_elements: weights x backward calls). A measured
    // time per segment fits rates to them (autoscheduler/calibrate.h,
    // bench/gpu/fit_device_rates.cpp).
    double flops = 0, elements = 0, moved_bytes = 0, weight_elements = 0;
    int64_t calls = 0;
};

struct Plan {
    std::string model;
    int64_t width = 0, height = 0;
    int batch = 1;
    int64_t memory_cap = 0, checkpoint_cap = 0;  // as requested; 0: none
    bool device = false;                         // memory_cap and the byte predictions are of device memory
    bool image_gradient = true;                  // the kernels give the image's gradient (PlanRequest)
    bool mapped_checkpoints = false;             // peak_bytes includes resident checkpoint pages (PlanRequest)
    std::vector<int> cuts;                       // layer indices (after which the trunk is cut)
    std::vector<std::string> cut_names;          // the same, by layer name
    std::vector<SegmentPlan> segments;
    int64_t fixed_bytes = 0;       // parameters, gradients, optimizer state
    // Halide's runtime outside the kernels (PlanRequest::runtime_reserve):
    // it takes anywhere from nothing to this, so a measured peak may fall
    // short of peak_bytes by up to this much.
    int64_t reserve_bytes = 0;
    int64_t head_bytes = 0;        // the untiled head's call
    // Predicted peak working memory: fixed + reserve + the worst call (with
    // mapped checkpoints, the call's resident checkpoint pages too).
    int64_t peak_bytes = 0;
    int64_t checkpoint_bytes = 0;  // predicted checkpoint store
    double flops = 0;              // executed per step (batch included)
    double recompute = 1;          // flops / training_step_flops
    double seconds = 0;            // predicted per step (batch included)

    std::vector<TileSize> tile_sizes() const;
    std::string cuts_string() const;  // "pool1,pool2": parse_cuts reads it
};

std::string plan_to_json(const Plan &p);  // pretty-printed
// A plan file that cannot be read or does not fit the model: bad input (the
// user's file), not a bad model.
class PlanFileError : public DataError {
public:
    using DataError::DataError;
};

// Reads a plan written by plan_to_json; checks it against the model (layer
// names, segment count). Throws PlanFileError naming `source`.
Plan plan_from_json(const std::string &text, const Model &m, const std::string &source);
// Per segment: layers, tile, tiles, window, recompute, predicted memory; totals.
std::string plan_table(const Plan &p, const Model &m);

}  // namespace segtile
