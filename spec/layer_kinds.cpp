// The layer-kind table: one row per kind (see spec/layer_kinds.h).
#include "spec/layer_kinds.h"

#include <algorithm>
#include <stdexcept>

namespace segtile {

namespace {

std::string positive(int v, const char *field) {
    return v > 0 ? "" : std::string("\"") + field + "\" must be positive, got " + std::to_string(v);
}

// A window of `kernel` taps `dilation` apart, every `stride` pixels, over
// an input padded by `padding`: conv2d and the pools.
AxisMap window(int kernel, int stride, int padding, int dilation) {
    const int64_t span = (int64_t)dilation * (kernel - 1);
    AxisMap a;
    a.add = 2 * padding - span - 1;
    a.shrink = stride;
    a.plus = 1;
    a.step = stride;
    a.lo_add = -padding;
    a.hi_add = -padding + span;
    a.min_input = span + 1 - 2 * padding;
    return a;
}

AxisMap global_axis(const Layer &) {
    AxisMap a;
    a.grow = 0;
    a.plus = 1;
    return a;
}

std::vector<ParamSpec> weight_and_bias(const Layer &l, std::vector<int64_t> weight, int64_t outputs) {
    std::vector<ParamSpec> p = {{"weight", 0, ParamRole::Weight, std::move(weight)}};
    if (l.bias) p.push_back({"bias", 0, ParamRole::Bias, {outputs}});
    return p;
}

// A multiply-add counts as 2 FLOPs; the bias is one add per output.
LayerFlops macs_flops(double macs, double bias_adds) {
    return {2 * macs + bias_adds, 2 * macs, 2 * macs + bias_adds};
}

LayerFlops pointwise_flops(const Layer &, double out) { return {out, out, 0}; }
LayerFlops no_flops(const Layer &, double) { return {}; }  // data movement only

std::string pool_resolve(Layer &l, const std::vector<int> &) {
    for (const std::string &e : {positive(l.kernel, "kernel"), positive(l.stride, "stride")})
        if (!e.empty()) return e;
    if (l.padding < 0 || 2 * l.padding > l.kernel) return "\"padding\" must be between 0 and kernel/2 (as in PyTorch)";
    return "";
}

AxisMap pool_axis(const Layer &l) { return window(l.kernel, l.stride, l.padding, 1); }

LayerFlops pool_flops(const Layer &l, double out) {
    const double taps = (double)l.kernel * l.kernel;
    return {out * taps, out * taps, 0};
}

double strided_reads(const Layer &l) { return (double)l.stride * l.stride * l.in_channels; }

std::vector<LayerKindInfo> make_table() {
    std::vector<LayerKindInfo> t = {
        {
            .kind = LayerKind::Conv2d,
            .name = "conv2d",
            .required = {"out_channels", "kernel"},
            .optional = {"stride", "padding", "dilation", "groups", "bias"},
            .axis = [](const Layer &l) { return window(l.kernel, l.stride, l.padding, l.dilation); },
            .resolve = [](Layer &l, const std::vector<int> &) -> std::string {
                for (const std::string &e : {positive(l.out_channels, "out_channels"), positive(l.kernel, "kernel"),
                                             positive(l.stride, "stride"), positive(l.dilation, "dilation"),
                                             positive(l.groups, "groups")})
                    if (!e.empty()) return e;
                if (l.padding < 0) return "\"padding\" must be >= 0";
                if (l.in_channels % l.groups || l.out_channels % l.groups)
                    return "groups=" + std::to_string(l.groups) + " must divide in_channels=" +
                           std::to_string(l.in_channels) + " and out_channels=" + std::to_string(l.out_channels);
                l.channels = l.out_channels;
                return "";
            },
            .params = [](const Layer &l) {
                return weight_and_bias(l, {l.kernel, l.kernel, l.in_channels / l.groups, l.out_channels},
                                       l.out_channels);
            },
            .flops = [](const Layer &l, double out) {
                return macs_flops(out * (double)(l.in_channels / l.groups) * l.kernel * l.kernel, l.bias ? out : 0);
            },
            .reads_per_pixel = strided_reads,
            .example = R"("out_channels": 3, "kernel": 3, "stride": 2, "padding": 1)",
        },
        {
            .kind = LayerKind::Relu,
            .name = "relu",
            .zero_preserving = true,
            .flops = pointwise_flops,
        },
        {
            .kind = LayerKind::LeakyRelu,
            .name = "leaky_relu",
            .optional = {"negative_slope"},
            .zero_preserving = true,
            .flops = pointwise_flops,
            .example = R"("negative_slope": 0.1)",
        },
        {
            .kind = LayerKind::Sigmoid,
            .name = "sigmoid",
            .flops = [](const Layer &, double out) { return LayerFlops{4 * out, 3 * out, 0}; },
        },
        {
            .kind = LayerKind::MaxPool,
            .name = "max_pool",
            .required = {"kernel"},
            .optional = {"stride", "padding"},
            .stride_defaults_to_kernel = true,
            .axis = pool_axis,
            .resolve = pool_resolve,
            .flops = pool_flops,
            .reads_per_pixel = strided_reads,
            .example = R"("kernel": 3, "stride": 2, "padding": 1)",
        },
        {
            .kind = LayerKind::AvgPool,
            .name = "avg_pool",
            .required = {"kernel"},
            .optional = {"stride", "padding"},
            .backward_reads_input = false,
            .stride_defaults_to_kernel = true,
            .axis = pool_axis,
            .resolve = pool_resolve,
            .flops = pool_flops,
            .reads_per_pixel = strided_reads,
            .example = R"("kernel": 2)",
        },
        {
            .kind = LayerKind::BatchNorm,
            .name = "batch_norm",
            .optional = {"eps"},
            .resolve = [](Layer &l, const std::vector<int> &) -> std::string {
                return l.eps > 0 ? "" : "\"eps\" must be positive";
            },
            .params = [](const Layer &l) {
                const std::vector<int64_t> c = {l.channels};
                return std::vector<ParamSpec>{
                    {"weight", 0, ParamRole::Weight, c, true, ParamInit::Ones},
                    {"bias", 0, ParamRole::Bias, c, true, ParamInit::Zeros},
                    {"running_mean", 0, ParamRole::RunningMean, c, false, ParamInit::Zeros},
                    {"running_var", 0, ParamRole::RunningVar, c, false, ParamInit::Ones},
                };
            },
            // Frozen: one multiply-add per element.
            .flops = [](const Layer &, double out) { return LayerFlops{2 * out, out, 2 * out}; },
            .example = R"("eps": 0.001)",
        },
        {
            .kind = LayerKind::Upsample,
            .name = "upsample",
            .optional = {"factor"},
            .zero_preserving = true,
            .backward_reads_input = false,
            .axis = [](const Layer &l) {
                AxisMap a;
                a.grow = l.factor;
                a.span_div = l.factor;
                return a;
            },
            .resolve = [](Layer &l, const std::vector<int> &) -> std::string {
                return l.factor >= 2 ? "" : "\"factor\" must be 2 or more";
            },
            .flops = no_flops,
            .reads_per_pixel = [](const Layer &l) { return (double)l.channels / ((double)l.factor * l.factor); },
            .example = R"("factor": 3)",
        },
        {
            .kind = LayerKind::Concat,
            .name = "concat",
            .joins = true,
            .zero_preserving = true,
            .backward_reads_input = false,
            .resolve = [](Layer &l, const std::vector<int> &in) -> std::string {
                l.channels = 0;
                for (int c : in) l.channels += c;
                return "";
            },
            .flops = no_flops,
            .reads_per_pixel = [](const Layer &l) { return (double)l.channels; },
        },
        {
            .kind = LayerKind::Add,
            .name = "add",
            .joins = true,
            .zero_preserving = true,
            .backward_reads_input = false,
            .resolve = [](Layer &l, const std::vector<int> &in) -> std::string {
                for (size_t k = 1; k < in.size(); k++)
                    if (in[k] != in[0])
                        return "channel mismatch: input '" + l.inputs[0] + "' has " + std::to_string(in[0]) +
                               " channels but '" + l.inputs[k] + "' has " + std::to_string(in[k]);
                return "";
            },
            // The gradient passes through.
            .flops = [](const Layer &l, double out) {
                return LayerFlops{out * ((double)l.input_ids.size() - 1), 0, 0};
            },
            .reads_per_pixel = [](const Layer &l) { return (double)l.input_ids.size() * l.channels; },
        },
        {
            .kind = LayerKind::GlobalAvgPool,
            .name = "global_avg_pool",
            .global = true,
            .backward_reads_input = false,
            .axis = global_axis,
            // Per input pixel: training_step_flops scales by the input's pixels.
            .flops = [](const Layer &l, double) { return LayerFlops{(double)l.channels, (double)l.channels, 0}; },
        },
        {
            .kind = LayerKind::Flatten,
            .name = "flatten",
            .global = true,
            .backward_reads_input = false,
            .axis = global_axis,
            .vector_shape = [](const Layer &, const TensorShape &in, TensorShape &out, const std::string &) {
                out.channels = in.width * in.height * in.channels;
                return std::string();
            },
            .flops = no_flops,
        },
        {
            .kind = LayerKind::Dense,
            .name = "dense",
            .required = {"out_features"},
            .optional = {"bias", "in_features"},
            .global = true,
            .needs_vector_input = true,
            .axis = global_axis,
            .resolve = [](Layer &l, const std::vector<int> &) -> std::string {
                if (std::string e = positive(l.out_features, "out_features"); !e.empty()) return e;
                if (l.in_features == 0) l.in_features = l.in_channels;
                l.channels = l.out_features;
                return "";
            },
            // Flatten's length depends on the image size; the weights do not.
            .vector_shape = [](const Layer &l, const TensorShape &in, TensorShape &, const std::string &at_image) {
                if (in.channels == l.in_features) return std::string();
                return "expects " + std::to_string(l.in_features) + " input features but gets " +
                       std::to_string(in.channels) + " at image " + at_image +
                       "; set \"in_features\" or pool globally before flatten";
            },
            .params = [](const Layer &l) { return weight_and_bias(l, {l.in_features, l.out_features}, l.out_features); },
            .flops = [](const Layer &l, double) {
                const double in = l.in_features > 0 ? l.in_features : l.in_channels;
                return macs_flops(in * l.out_features, l.bias ? l.out_features : 0);
            },
        },
        {
            .kind = LayerKind::Silu,
            .name = "silu",
            .zero_preserving = true,
            .flops = [](const Layer &, double out) { return LayerFlops{5 * out, 6 * out, 0}; },
        },
        {
            .kind = LayerKind::ConvTranspose2d,
            .name = "conv_transpose",
            .required = {"out_channels", "kernel"},
            .optional = {"stride", "padding", "output_padding", "dilation", "bias"},
            // Output extent (in - 1) s - 2p + d (k - 1) + output_padding + 1. The
            // span read is the hull Halide infers for the phase convolutions
            // (generators/layers/convolution.h): every phase reads input q + offset
            // for q = floor(x / s), offsets from ceil((p - d (k - 1)) / s) to ceil(p / s).
            .axis = [](const Layer &l) {
                const int64_t s = l.stride, span = (int64_t)l.dilation * (l.kernel - 1);
                auto ceil_div = [](int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); };
                AxisMap a;
                a.grow = s;
                a.add = -s - 2 * l.padding + span + l.output_padding + 1;
                a.span_div = s;
                a.lo_add = s * ceil_div(l.padding - span, s);
                a.hi_add = s * ceil_div(l.padding, s);
                return a;
            },
            .resolve = [](Layer &l, const std::vector<int> &) -> std::string {
                for (const std::string &e : {positive(l.out_channels, "out_channels"), positive(l.kernel, "kernel"),
                                             positive(l.stride, "stride"), positive(l.dilation, "dilation")})
                    if (!e.empty()) return e;
                if (l.padding < 0) return "\"padding\" must be >= 0";
                if (l.output_padding < 0 || l.output_padding >= std::max(l.stride, l.dilation))
                    return "\"output_padding\" must be >= 0 and smaller than stride or dilation (as in PyTorch)";
                l.channels = l.out_channels;
                return "";
            },
            // PyTorch's weight is (in, out, kH, kW).
            .params = [](const Layer &l) {
                return weight_and_bias(l, {l.kernel, l.kernel, l.out_channels, l.in_channels}, l.out_channels);
            },
            .flops = [](const Layer &l, double out) {
                const double taps = (double)l.kernel * l.kernel / ((double)l.stride * l.stride);
                return macs_flops(out * l.in_channels * taps, l.bias ? out : 0);
            },
            .reads_per_pixel = [](const Layer &l) { return (double)l.in_channels / ((double)l.stride * l.stride); },
            .example = R"("out_channels": 2, "kernel": 3, "stride": 2, "padding": 1, "output_padding": 1)",
        },
    };
    for (size_t i = 0; i < t.size(); i++)
        if ((size_t)t[i].kind != i) throw std::logic_error("spec/layer_kinds.cpp: the table is not in LayerKind order");
    return t;
}

}  // namespace

const std::vector<LayerKindInfo> &layer_kinds() {
    static const std::vector<LayerKindInfo> table = make_table();
    return table;
}

const LayerKindInfo &kind_info(LayerKind k) { return layer_kinds().at((size_t)k); }

const LayerField *find_layer_field(const std::string &name) {
    static const LayerField fields[] = {
        {"out_channels", &Layer::out_channels},
        {"kernel", &Layer::kernel},
        {"stride", &Layer::stride},
        {"padding", &Layer::padding},
        {"dilation", &Layer::dilation},
        {"groups", &Layer::groups},
        {"factor", &Layer::factor},
        {"out_features", &Layer::out_features},
        {"in_features", &Layer::in_features},
        {"output_padding", &Layer::output_padding},
        {"negative_slope", nullptr, &Layer::negative_slope},
        {"eps", nullptr, &Layer::eps},
        {"bias", nullptr, nullptr, &Layer::bias},
    };
    for (const LayerField &f : fields)
        if (name == f.name) return &f;
    return nullptr;
}

int64_t ParamSpec::numel() const {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return n;
}

}  // namespace segtile
