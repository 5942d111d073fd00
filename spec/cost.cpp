#include "spec/cost.h"

#include <algorithm>

namespace segtile {

LayerFlops layer_flops(const Model &m, int i, int64_t out_w, int64_t out_h) {
    const Layer &l = m.layers.at(i);
    const double px = (double)out_w * (double)out_h;
    const double out = px * l.channels;
    LayerFlops f;
    switch (l.kind) {
    case LayerKind::Conv2d: {
        const double macs = out * (double)(l.in_channels / l.groups) * l.kernel * l.kernel;
        f.forward = 2 * macs + (l.bias ? out : 0);
        f.input_grad = 2 * macs;
        f.weight_grad = 2 * macs + (l.bias ? out : 0);
        break;
    }
    case LayerKind::Dense: {
        const double in = l.in_features > 0 ? l.in_features : l.in_channels;
        const double macs = in * l.out_features;
        f.forward = 2 * macs + (l.bias ? l.out_features : 0);
        f.input_grad = 2 * macs;
        f.weight_grad = 2 * macs + (l.bias ? l.out_features : 0);
        break;
    }
    case LayerKind::MaxPool:
    case LayerKind::AvgPool:
        f.forward = out * l.kernel * l.kernel;
        f.input_grad = out * l.kernel * l.kernel;
        break;
    case LayerKind::BatchNorm:  // frozen: one multiply-add per element
        f.forward = 2 * out;
        f.input_grad = out;
        f.weight_grad = 2 * out;
        break;
    case LayerKind::GlobalAvgPool:  // out is 1x1: count the input it reads
        f.forward = f.input_grad = (double)m.layers.at(i).channels;
        break;
    case LayerKind::Add:
        f.forward = out * ((double)l.input_ids.size() - 1);
        f.input_grad = 0;  // the gradient passes through
        break;
    case LayerKind::Sigmoid:
        f.forward = 4 * out;
        f.input_grad = 3 * out;
        break;
    case LayerKind::Relu:
    case LayerKind::LeakyRelu:
        f.forward = out;
        f.input_grad = out;
        break;
    case LayerKind::Upsample:
    case LayerKind::Concat:
    case LayerKind::Flatten:
        break;  // data movement only
    }
    return f;
}

LayerTraffic layer_traffic(const Model &m, int i, int64_t out_w, int64_t out_h) {
    const Layer &l = m.layers.at(i);
    const double px = (double)out_w * (double)out_h;
    double in_per_px = 0;  // input elements per output pixel
    switch (l.kind) {
    case LayerKind::Conv2d:
    case LayerKind::MaxPool:
    case LayerKind::AvgPool:
        in_per_px = (double)l.stride * l.stride * l.in_channels;
        break;
    case LayerKind::Add:
        in_per_px = (double)l.input_ids.size() * l.channels;
        break;
    case LayerKind::Concat:
        in_per_px = l.channels;
        break;
    case LayerKind::Upsample:
        in_per_px = (double)l.channels / ((double)l.factor * l.factor);
        break;
    case LayerKind::GlobalAvgPool:  // the head: a few vectors
    case LayerKind::Dense:
    case LayerKind::Flatten:
        return {};
    default:  // pointwise: batch norm, activations
        in_per_px = l.channels;
        break;
    }
    LayerTraffic t;
    t.forward = px * (in_per_px + l.channels);
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
