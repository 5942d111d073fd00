#include "test/plugin/test_pipelines.h"

#include <cstdint>
#include <stdexcept>

namespace segtile::plugin_test {

using namespace Halide;

namespace {

// Deterministic, non-trivial input values.
Buffer<float> ramp_image(const std::vector<int> &sizes, float scale) {
    Buffer<float> b(sizes);
    b.for_each_element([&](const int *pos) {
        uint32_t h = 17;  // unsigned: the hash wraps around
        for (int d = 0; d < b.dimensions(); d++) h = h * 31u + static_cast<uint32_t>(pos[d] * (d + 3));
        b(pos) = scale * static_cast<float>((h * 2654435761u) % 1000u) / 1000.0f - scale / 2;
    });
    return b;
}

Func downsample(const Func &f) {
    Var x, y;
    Func dx("down_x"), dy("down_y");
    dx(x, y) = (f(2 * x - 1, y) + 2.0f * f(2 * x, y) + f(2 * x + 1, y)) * 0.25f;
    dy(x, y) = (dx(x, 2 * y - 1) + 2.0f * dx(x, 2 * y) + dx(x, 2 * y + 1)) * 0.25f;
    return dy;
}

Func upsample(const Func &f) {
    Var x, y;
    Func ux("up_x"), uy("up_y");
    ux(x, y) = (f(x / 2, y) + f((x + 1) / 2, y)) * 0.5f;
    uy(x, y) = (ux(x, y / 2) + ux(x, (y + 1) / 2)) * 0.5f;
    return uy;
}

}  // namespace

Func blur_chain(const Func &input, int stages) {
    Func f = input;
    for (int s = 0; s < stages; s++) {
        Var x, y;
        Func g("blur" + std::to_string(s));
        Expr sum = 0.0f;
        for (int dy = -1; dy <= 1; dy++) {
            for (int dx = -1; dx <= 1; dx++) sum += f(x + dx, y + dy);
        }
        g(x, y) = sum / 9.0f;
        f = g;
    }
    return f;
}

TestPipeline blur_chain_pipeline(int width, int height, int stages) {
    Func in = BoundaryConditions::repeat_edge(ramp_image({width, height}, 1.0f));
    Func out = blur_chain(in, stages);
    out.set_estimates({{0, width}, {0, height}});
    return {{out}, {{width, height}}};
}

TestPipeline pyramid_pipeline(int width, int height, int levels) {
    Var x, y;
    Func in = BoundaryConditions::repeat_edge(ramp_image({width, height}, 1.0f));
    std::vector<Func> gaussian{in};
    for (int l = 1; l < levels; l++) gaussian.push_back(downsample(gaussian.back()));
    // Laplacian levels, each remapped by a detail-boosting nonlinearity,
    // then collapsed from the coarsest level up.
    std::vector<Func> remapped(levels);
    for (int l = 0; l < levels; l++) {
        Func lap("laplacian" + std::to_string(l)), r("remapped" + std::to_string(l));
        if (l == levels - 1) lap(x, y) = gaussian[l](x, y);
        else lap(x, y) = gaussian[l](x, y) - upsample(gaussian[l + 1])(x, y);
        Expr v = lap(x, y);
        r(x, y) = v * 1.5f / (1.0f + v * v);
        remapped[l] = r;
    }
    Func collapsed = remapped[levels - 1];
    for (int l = levels - 2; l >= 0; l--) {
        Func c("collapsed" + std::to_string(l));
        c(x, y) = remapped[l](x, y) + upsample(collapsed)(x, y);
        collapsed = c;
    }
    collapsed.set_estimates({{0, width}, {0, height}});
    return {{collapsed}, {{width, height}}};
}

TestPipeline conv_relu_gradient_pipeline(int width, int height, int channels) {
    Buffer<float> image = ramp_image({width, height, channels}, 2.0f);
    Buffer<float> weights = ramp_image({3, 3, channels, channels}, 0.5f);
    Var x, y, c;
    Func in = BoundaryConditions::constant_exterior(image, 0.0f);
    RDom k(0, 3, 0, 3, 0, channels);
    Func conv("conv"), relu("relu"), loss("loss");
    conv(x, y, c) = 0.0f;
    conv(x, y, c) += weights(k.x, k.y, k.z, c) * in(x + k.x - 1, y + k.y - 1, k.z);
    relu(x, y, c) = max(conv(x, y, c), 0.0f);
    RDom r(0, width, 0, height, 0, channels);
    loss() = 0.0f;
    loss() += relu(r.x, r.y, r.z) * relu(r.x, r.y, r.z) * 0.5f;
    Derivative d = propagate_adjoints(loss);
    Func grad_weights = d(weights), grad_image = d(image);
    grad_weights.set_estimates({{0, 3}, {0, 3}, {0, channels}, {0, channels}});
    grad_image.set_estimates({{0, width}, {0, height}, {0, channels}});
    return {{grad_weights, grad_image}, {{3, 3, channels, channels}, {width, height, channels}}};
}

TestPipeline make_pipeline(const std::string &name) {
    if (name == "blur_chain") return blur_chain_pipeline(192, 160, 8);
    if (name == "pyramid") return pyramid_pipeline(256, 192, 4);
    if (name == "conv_relu_gradient") return conv_relu_gradient_pipeline(48, 40, 4);
    throw std::invalid_argument("no test pipeline named " + name);
}

void schedule_all_root(const std::vector<Func> &outputs) {
    std::vector<Internal::Function> functions;
    for (const Func &f : outputs) functions.push_back(f.function());
    for (auto &[name, f] : Internal::build_environment(functions)) Func(f).compute_root();
}

}  // namespace segtile::plugin_test
