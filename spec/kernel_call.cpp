#include "spec/kernel_call.h"

namespace segtile {

namespace {

using Dims = std::vector<std::pair<int64_t, int64_t>>;

int64_t channels_of(const Model &m, int t) {
    return t == (int)m.layers.size() ? m.input_channels : m.layers[t].channels;
}

Dims box_dims(const Box<int64_t> &b, int64_t channels) {
    return {{b.x.lo, b.x.hi - b.x.lo + 1}, {b.y.lo, b.y.hi - b.y.lo + 1}, {0, channels}, {0, 1}};
}

Dims param_dims(const ParamSpec &p) {
    Dims d;
    for (int64_t e : p.dims) d.push_back({0, e});
    return d;
}

}  // namespace

std::map<std::string, int64_t> tile_scalars(const Model &m, const TileWindows &w, int64_t width, int64_t height) {
    std::map<std::string, int64_t> s{{"image_width", width}, {"image_height", height}};
    auto box = [&](const std::string &prefix, int t, const Box<int64_t> &b) {
        const std::string p = prefix + tensor_name(m, t) + "_";
        s[p + "x_min"] = b.x.lo;
        s[p + "x_max"] = b.x.hi;
        s[p + "y_min"] = b.y.lo;
        s[p + "y_max"] = b.y.hi;
    };
    for (const auto &[t, b] : w.targets) box("tile_", t, b);
    for (int t = 0; t < (int)w.need.size(); t++)
        if (w.need[t]) box("window_", t, *w.need[t]);
    return s;
}

KernelCall tile_kernel_call(const Model &m, const SegmentLayout &layout, KernelKind kind, int segment,
                            const TileWindows &w, const std::vector<TensorShape> &shapes, int64_t width,
                            int64_t height) {
    (void)shapes;
    const auto specs = m.params();
    KernelCall c;
    c.scalars = tile_scalars(m, w, width, height);
    for (const auto &a : kernel_signature(m, layout, kind, segment)) {
        if (a.scalar) continue;
        if (a.param >= 0) {
            c.buffers[a.name] = param_dims(specs[a.param]);
            continue;
        }
        const std::string name = a.name;
        const Box<int64_t> *box = nullptr;
        for (const auto &[t, b] : w.targets)
            if (t == a.tensor) box = &b;
        if (name.rfind("in_", 0) == 0 || name.rfind("grad_in_", 0) == 0) box = &*w.need.at(a.tensor);
        if (box) c.buffers[name] = box_dims(*box, channels_of(m, a.tensor));
    }
    return c;
}

KernelCall head_kernel_call(const Model &m, const SegmentLayout &layout, const std::vector<TensorShape> &shapes,
                            int64_t width, int64_t height) {
    const auto specs = m.params();
    const auto whole = whole_boxes(m, shapes, width, height);
    const TensorShape &ps = shapes.at(m.loss.input_id);
    KernelCall c;
    for (const auto &a : kernel_signature(m, layout, KernelKind::Head, 0)) {
        if (a.scalar) continue;
        if (a.param >= 0) c.buffers[a.name] = param_dims(specs[a.param]);
        else if (a.tensor >= 0) c.buffers[a.name] = box_dims(whole.at(a.tensor), channels_of(m, a.tensor));
        else if (a.name == "labels") c.buffers[a.name] = {{0, 1}};
        else if (a.name == "loss") c.buffers[a.name] = {};
        else c.buffers[a.name] = {{0, ps.width}, {0, ps.height}, {0, ps.channels}, {0, 1}};  // prediction, target
    }
    return c;
}

}  // namespace segtile
