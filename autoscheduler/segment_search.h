// The planner's view of one candidate segment: its predicted memory and time
// at a tile size (memory_model.h, time_model.h), the fastest tile under a
// budget, and the exact/analytic memory ratios learned per segment that
// scale the analytic model during the search (planner.cpp drives it).
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <tuple>
#include <vector>

#include "autoscheduler/planner.h"

namespace segtile {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// The planner's state for one request: shapes and per-segment evaluations.
class SegmentSearch {
public:
    SegmentSearch(const Model &m, const PlanRequest &req, KernelMemory *exact);

    struct Eval {
        bool feasible = false;
        SegmentPlan plan;
        double seconds = kInfinity;
        int64_t store = 0;   // checkpoint bytes this segment's outputs add (values and gradients)
        int64_t bytes = 0;   // max(forward, backward) working bytes of a call
    };

    // Segment a..b at one tile size; `use_exact`: memory from the exact
    // model, else the analytic one scaled by the segment's ratio.
    Eval evaluate(int a, int b, TileSize tile, bool use_exact);

    // The fastest tile for segment a..b whose calls fit `budget` bytes
    // (0: no budget); infeasible if none does. Also records the smallest
    // memory any tile needs in `min_bytes`, and that tile in `min_tile`.
    Eval best_tile(int a, int b, int64_t budget, bool use_exact, int64_t *min_bytes = nullptr,
                   TileSize *min_tile = nullptr);

    bool calibrated(int a, int b) const { return ratios_.count({a, b}) > 0; }
    double ratio(int a, int b) const;
    // Learns exact/analytic for a segment at its chosen tile.
    void calibrate(int a, int b, TileSize tile);
    // Learns exact/analytic again at the segment's smallest tile, keeping
    // the larger of that and the ratio learned before.
    void calibrate_smallest(int a, int b);

    bool mapped() const { return req_.mapped_checkpoints; }  // CPU plans with mapped checkpoints
    int64_t fixed() const { return fixed_; }
    int64_t reserve() const { return reserve_; }
    // What every call's working memory sits on: the fixed part and the reserve.
    int64_t held() const { return fixed_ + reserve_; }
    int64_t head() const { return head_; }
    int end() const { return end_; }
    const std::vector<TensorShape> &shapes() const { return shapes_; }

    int64_t image_bytes() const { return req_.width * req_.height * m_.input_channels * req_.type_bytes; }
    // The image's gradient in the store, where the request asks for it.
    int64_t image_grad_bytes() const { return req_.image_gradient ? image_bytes() : 0; }

private:
    void learned(double r);
    int64_t head_bytes();
    // Whether a CPU call of segment `seg` could be passed its checkpoint
    // windows: Halide refuses a buffer spanning 2^31 elements or more.
    bool windows_passable(const SegmentSpec &seg) const;

    const Model &m_;
    PlanRequest req_;
    KernelMemory *exact_;
    AnalyticKernelMemory analytic_;
    std::vector<TensorShape> shapes_;
    std::vector<Box<int64_t>> whole_;
    int end_;
    int64_t fixed_ = 0, reserve_ = 0, head_ = 0;
    std::map<int, int64_t> trainable_bytes_;  // per layer
    std::map<int, int64_t> param_bytes_;      // per layer, every parameter (device plans only)
    std::map<std::pair<int, int>, double> ratios_;
    double default_ratio_ = 1.0;
    bool any_learned_ = false;
    std::map<std::tuple<int, int, int64_t, bool>, Eval> best_cache_;
};

}  // namespace segtile
