#include "autoscheduler/memory_model.h"

#include <algorithm>
#include <set>

namespace segtile {

int64_t AnalyticKernelMemory::peak(const SegmentLayout &layout, KernelKind kind, int segment, const KernelCall &call) {
    // Each layer's output over the window the call computes, once forward
    // and (backward) once more for its adjoint; the head: whole tensors.
    if (kind == KernelKind::Head) {
        // Every buffer of the call, twice (values and adjoints): the head
        // reads small, globally pooled tensors.
        int64_t bytes = 0;
        for (const auto &[name, dims] : call.buffers) {
            int64_t n = 1;
            for (const auto &d : dims) n *= d.second;
            bytes += n * type_bytes_;
        }
        return 2 * bytes;
    }
    const SegmentSpec &seg = layout.segments.at(segment);
    const auto shapes = model_.shapes_unchecked(call.scalars.at("image_width"), call.scalars.at("image_height"));
    TileWindows w;
    for (int o : seg.outputs) {
        const std::string p = "tile_" + tensor_name(model_, o) + "_";
        w.targets.push_back({o, {{call.scalars.at(p + "x_min"), call.scalars.at(p + "x_max")},
                                 {call.scalars.at(p + "y_min"), call.scalars.at(p + "y_max")}}});
    }
    const auto whole = whole_boxes(model_, shapes, call.scalars.at("image_width"), call.scalars.at("image_height"));
    w.need = required_boxes<int64_t, IntOps>(model_, seg.first, seg.last, w.targets, whole);
    return peak(seg, kind, w);
}

int64_t AnalyticKernelMemory::peak(const SegmentSpec &seg, KernelKind kind, const TileWindows &w) const {
    int64_t bytes = 0;
    for (int l = seg.first; l <= seg.last; l++)
        if (w.need.at(l)) bytes += box_pixels(*w.need[l]) * model_.layers[l].channels * type_bytes_;
    return kind == KernelKind::Backward ? 2 * bytes : bytes;
}

WorstCalls worst_calls(const Model &m, const SegmentSpec &seg, const TileRegions &r,
                       const std::vector<Box<int64_t>> &whole, bool backward, const std::vector<int> &graded,
                       int type_bytes, const CallPeak &peak) {
    const size_t nx = r.x[0].size(), ny = r.y[0].size();
    const std::set<size_t> xs{0, std::min<size_t>(1, nx - 1), nx - 1}, ys{0, std::min<size_t>(1, ny - 1), ny - 1};
    WorstCalls w;
    int64_t worst_windows = -1;
    for (size_t tx : xs)
        for (size_t ty : ys) {
            TileWindows c = tile_windows(m, seg, r, tx, ty, whole);
            const int64_t f_here = peak(KernelKind::Forward, c);
            if (!backward && f_here >= w.forward) w.windows = c;
            w.forward = std::max(w.forward, f_here);
            if (!backward) continue;
            const int64_t b_here = peak(KernelKind::Backward, c);
            int64_t windows = 0;
            for (int t : graded) windows += box_pixels(*c.need[t]) * channels_of(m, t);
            if (b_here + windows * type_bytes > w.backward + std::max<int64_t>(worst_windows, 0) * type_bytes) {
                w.backward = b_here;
                worst_windows = windows;
                w.windows = c;
            }
        }
    return w;
}

}  // namespace segtile
