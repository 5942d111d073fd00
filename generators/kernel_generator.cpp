// AOT generator of any segtile kernel (spec/kernel_signature.h): the
// untiled training step, or a segment's forward / backward tile kernel, or
// the head after a tiled trunk. Inputs and outputs depend on the model and
// the cuts, so they are declared in configure() from the signature.
#include "Halide.h"
#include "schedules/cpu_schedule.h"
#include "schedules/gpu_schedule.h"
#include "generators/kernels.h"
#include "spec/kernel_signature.h"

namespace {

using namespace Halide;

class KernelGenerator : public Generator<KernelGenerator> {
public:
    GeneratorParam<std::string> model_file{"model_file", ""};
    GeneratorParam<std::string> cuts{"cuts", ""};          // layer names/indices; "" = none
    GeneratorParam<bool> untiled{"untiled", false};         // the whole training step, no segments
    GeneratorParam<std::string> kind{"kind", "head"};       // forward, backward, head
    GeneratorParam<int> segment{"segment", 0};
    GeneratorParam<Type> precision{"precision", Float(32)};
    GeneratorParam<bool> image_gradient{"image_gradient", true};  // grad_in_image (SegmentLayout)

    void configure() {
        model_ = segtile::load_model_file(model_file);
        layout_ = untiled ? segtile::untiled_layout(model_, image_gradient)
                          : segtile::make_segments(model_, segtile::parse_cuts(model_, cuts), image_gradient);
        const std::string k = kind;
        kind_ = k == "forward" ? segtile::KernelKind::Forward
                : k == "backward" ? segtile::KernelKind::Backward
                                  : segtile::KernelKind::Head;
        sig_ = segtile::kernel_signature(model_, layout_, kind_, segment);
        for (const auto &a : sig_) {
            if (a.output) outputs_.push_back(add_output<Buffer<>>(a.name, precision, a.dims));
            else if (a.scalar) scalars_.push_back(add_input<int32_t>(a.name));
            else buffers_.push_back(add_input<Buffer<>>(a.name, a.integer ? Int(32) : Type(precision), a.dims));
        }
    }

    void generate() {
        segtile::KernelInputs in;
        size_t b = 0, s = 0;
        for (const auto &a : sig_) {
            if (a.output) continue;
            if (a.scalar) {
                in.scalars[a.name] = *scalars_[s++];
                continue;
            }
            auto *p = buffers_[b++];
            in.buffers[a.name] = *p;
            if (a.dims == 4) in.extents[a.name] = {p->dim(0).extent(), p->dim(1).extent(), p->dim(3).extent()};
        }
        auto outs = segtile::build_kernel(model_, layout_, kind_, segment, in, precision);
        std::vector<Func> all;
        size_t o = 0;
        for (const auto &a : sig_)
            if (a.output) {
                *outputs_[o++] = outs.at(a.name);
                all.push_back(outs.at(a.name));
            }
        // A target with a GPU feature (x86-64-linux-cuda-cuda_capability_86)
        // gets the GPU schedule; Halide copies host inputs to the device.
        if (get_target().has_gpu_feature()) segtile::schedule_gpu(all, get_target());
        else segtile::schedule_cpu(all, get_target());
    }

private:
    segtile::Model model_;
    segtile::SegmentLayout layout_;
    segtile::KernelKind kind_ = segtile::KernelKind::Head;
    std::vector<segtile::KernelArg> sig_;
    std::vector<GeneratorInput<Buffer<>> *> buffers_;
    std::vector<GeneratorInput<int32_t> *> scalars_;
    std::vector<GeneratorOutput<Buffer<>> *> outputs_;
};

}  // namespace

HALIDE_REGISTER_GENERATOR(KernelGenerator, segtile_kernel)
