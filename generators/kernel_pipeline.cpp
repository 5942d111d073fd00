#include "generators/kernel_pipeline.h"

#include "generators/kernels.h"

namespace segtile {

KernelPipeline kernel_pipeline(const Model &m, const SegmentLayout &layout, KernelKind kind, int segment,
                               Halide::Type t, const std::set<std::string> &only) {
    const auto full_sig = kernel_signature(m, layout, kind, segment);
    KernelPipeline kp;
    KernelInputs in;
    for (const auto &a : full_sig) {
        if (a.output) continue;
        if (a.scalar) {
            Halide::Param<int32_t> p(a.name);
            in.scalars[a.name] = p;
            kp.args.push_back(p);
        } else {
            Halide::ImageParam p(a.integer ? Halide::Int(32) : t, a.dims, a.name);
            in.buffers[a.name] = p;
            if (a.dims == 4) in.extents[a.name] = {p.dim(0).extent(), p.dim(1).extent(), p.dim(3).extent()};
            kp.args.push_back(p);
        }
        kp.signature.push_back(a);
    }
    std::map<std::string, Halide::Func> outs;
    try {
        outs = build_kernel(m, layout, kind, segment, in, t);
    } catch (const Halide::Error &e) {
        throw std::runtime_error(std::string("Halide: ") + e.what());
    }
    for (const auto &a : full_sig)
        if (a.output && (only.empty() || only.count(a.name))) {
            kp.outputs.push_back(outs.at(a.name));
            kp.signature.push_back(a);
        }
    return kp;
}

}  // namespace segtile
