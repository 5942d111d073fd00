#include "autoscheduler/time_model.h"

#include "spec/cost.h"

namespace segtile {

namespace {

// Per layer of segment first..last, whether its backward kernel computes
// the layer's forward again: Halide computes only what the gradients read,
// so a layer is recomputed when its output is read by a backward that
// reads its input, by a recomputed layer, or by the loss. A segment that
// ends with a conv (cut before the activation) does not recompute that
// conv: its output gradient comes in, and its weight gradient reads its
// input. Counting every layer twice, the planner saw no difference between
// cuts and ran VGG16 at 1024^2 under a 1/8 cap at 1.33x the untiled FLOPs.
std::vector<bool> recomputed_layers(const Model &m, int first, int last) {
    std::vector<bool> r(m.layers.size(), false);
    for (int j = last; j >= first; j--) {  // a layer's consumers come after it
        if (j == m.loss.input_id) r[j] = true;
        for (int i : m.layers[j].input_ids)
            if (i >= first && (r[j] || kind_info(m.layers[j].kind).backward_reads_input)) r[i] = true;
    }
    return r;
}

}  // namespace

double predicted_seconds(const TimeRates &r, const TimeSample &s) {
    return s.flops / r.flops_per_second + s.elements / r.elements_per_second + s.moved_bytes / r.bytes_per_second +
           s.calls * r.seconds_per_tile + s.weight_elements / r.weights_per_second;
}

SegmentWork segment_work(const Model &m, const SegmentSpec &seg, const TileRegions &r,
                         const std::vector<Box<int64_t>> &whole, const std::vector<TensorShape> &shapes,
                         bool backward, bool image_gradient, const CallTraffic &call, int type_bytes) {
    // FLOPs over every tile: windows are separable (x from x, y from y),
    // so per layer the sum over tiles is (sum of widths) x (sum of heights).
    const size_t nx = r.x[0].size(), ny = r.y[0].size();
    const int L = (int)m.layers.size();
    std::vector<double> sum_w(L + 1, 0), sum_h(L + 1, 0);
    for (size_t tx = 0; tx < nx; tx++) {
        const TileWindows c = tile_windows(m, seg, r, tx, 0, whole);
        for (int l = seg.first; l <= seg.last; l++)
            if (c.need[l]) sum_w[l] += (double)(c.need[l]->x.hi - c.need[l]->x.lo + 1);
    }
    for (size_t ty = 0; ty < ny; ty++) {
        const TileWindows c = tile_windows(m, seg, r, 0, ty, whole);
        for (int l = seg.first; l <= seg.last; l++)
            if (c.need[l]) sum_h[l] += (double)(c.need[l]->y.hi - c.need[l]->y.lo + 1);
    }
    double executed = 0, untiled = 0, elements = 0;
    const std::vector<bool> again = recomputed_layers(m, seg.first, seg.last);
    for (int l = seg.first; l <= seg.last; l++) {
        // Per pixel costs from a 1x1 evaluation scale linearly with area.
        LayerFlops one = layer_flops(m, l, 1, 1);
        LayerTraffic traffic = layer_traffic(m, l, 1, 1);
        // A layer reading the image computes its input gradient only
        // for kernels built with it: priced anyway, a first segment's
        // backward (conv 3x3 64->64) was predicted 4/3 of the time it
        // took, and the calibration fitted a FLOP rate above the peak.
        if (reads_image(m, l) && !image_gradient) {
            traffic.backward -= traffic.forward - m.layers[l].channels;  // the input's gradient, not written
            one.input_grad = 0;
        }
        const double px = sum_w[l] * sum_h[l], forwards = again[l] && backward ? 2 : 1;
        executed += px * (forwards * one.forward + (backward ? one.backward() : 0));
        elements += px * (forwards * traffic.forward + (backward ? traffic.backward : 0));
        // Untiled training skips such a backward too.
        untiled += (double)shapes[l].width * shapes[l].height * (backward ? one.total() : one.forward);
    }
    SegmentWork w;
    w.recompute = untiled > 0 ? executed / untiled : 1;
    const double tiles = (double)(nx * ny);
    // Forward: windows read, tiles written; backward: windows read again,
    // gradient windows written and added, output gradients read, partials added.
    w.priced.moved_bytes = tiles * (call.windows + call.outputs) +
                           (backward ? tiles * (2.0 * call.windows + call.outputs + 2.0 * call.partials) : 0);
    w.priced.flops = executed;
    w.priced.elements = elements;
    w.priced.calls = (double)(int64_t)((backward ? 2 : 1) * tiles);
    w.priced.weight_elements = backward ? tiles * (double)call.partials / type_bytes : 0;
    return w;
}

TimeSample head_work(const Model &m, int end, const std::vector<TensorShape> &shapes) {
    TimeSample t;
    for (int l = end + 1; l < (int)m.layers.size(); l++) {
        const TensorShape &out = shapes[l];
        t.flops += layer_flops(m, l, out.width, out.height).total();
        const LayerTraffic traffic = layer_traffic(m, l, out.width, out.height);
        t.elements += traffic.forward + traffic.backward;
    }
    return t;
}

}  // namespace segtile
