#include "spec/cost.h"

#include <algorithm>

namespace segtile {

LayerFlops layer_flops(const Model &m, int i, int64_t out_w, int64_t out_h) {
    const Layer &l = m.layers.at(i);
    const LayerKindInfo &kind = kind_info(l.kind);
    return kind.flops ? kind.flops(l, (double)out_w * (double)out_h * l.channels) : LayerFlops{};
}

LayerTraffic layer_traffic(const Model &m, int i, int64_t out_w, int64_t out_h) {
    const Layer &l = m.layers.at(i);
    const LayerKindInfo &kind = kind_info(l.kind);
    if (kind.global) return {};  // the head: a few vectors
    const double in_per_px = kind.reads_per_pixel ? kind.reads_per_pixel(l) : l.channels;
    LayerTraffic t;
    t.forward = (double)out_w * (double)out_h * (in_per_px + l.channels);
    t.backward = 2 * t.forward;
    return t;
}

double training_step_elements(const Model &m, int64_t width, int64_t height) {
    const auto shapes = m.shapes(width, height);
    double total = 0;
    for (int i = 0; i < (int)m.layers.size(); i++) {
        const LayerTraffic t = layer_traffic(m, i, shapes[i].width, shapes[i].height);
        total += t.forward + t.backward;
    }
    return total;
}

bool reads_image(const Model &m, int i) {
    const Layer &l = m.layers.at(i);
    return std::any_of(l.input_ids.begin(), l.input_ids.end(), [](int in) { return in < 0; });
}

double training_step_flops(const Model &m, int64_t width, int64_t height) {
    const auto shapes = m.shapes(width, height);
    double total = 0;
    for (int i = 0; i < (int)m.layers.size(); i++) {
        LayerFlops f = layer_flops(m, i, shapes[i].width, shapes[i].height);
        // Global average pooling reads its whole input: scale by its pixels.
        if (m.layers[i].kind == LayerKind::GlobalAvgPool) {
            const int in = m.layers[i].input_ids[0];
            const double px = in < 0 ? (double)width * height : (double)shapes[in].width * shapes[in].height;
            f.forward *= px;
            f.input_grad *= px;
        }
        total += f.forward + f.weight_grad + (reads_image(m, i) ? 0 : f.input_grad);
    }
    return total;
}

}  // namespace segtile
