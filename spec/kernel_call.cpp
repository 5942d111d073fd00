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

KernelCall tile_kernel_call(const Model &m, const SegmentLayout &layout, KernelKind kind, int segment,
                            const TileWindows &w, const std::vector<TensorShape> &shapes, int64_t width,
                            int64_t height) {
    (void)shapes;
    const auto specs = m.params();
    KernelCall c;
    c.scalars["image_width"] = width;
    c.scalars["image_height"] = height;
    for (const auto &[t, box] : w.targets) {
        const std::string p = "tile_" + tensor_name(m, t) + "_";
        c.scalars[p + "x_min"] = box.x.lo;
        c.scalars[p + "x_max"] = box.x.hi;
        c.scalars[p + "y_min"] = box.y.lo;
        c.scalars[p + "y_max"] = box.y.hi;
    }
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
