#include "runtime/step_kernel.h"

#include <map>
#include <stdexcept>

namespace segtile {

namespace {
std::string c_name(const std::string &s) {
    std::string o;
    for (char ch : s) o += std::isalnum((unsigned char)ch) ? ch : '_';
    return o;
}
}  // namespace

AotStepKernel::AotStepKernel(const Model &m, ArgvFn argv, MetadataFn metadata, MemoryLedger *ledger)
    : model_(m), argv_(argv), md_(metadata()) {
    ctx_.ledger = ledger;
    KernelContext::install_halide_hooks();
    // The library must have been generated from this model: check every parameter is there.
    std::map<std::string, int> dims;
    for (int i = 0; i < md_->num_arguments; i++) dims[md_->arguments[i].name] = md_->arguments[i].dimensions;
    for (const auto &s : m.params()) {
        auto it = dims.find(c_name(s.name));
        if (it == dims.end() || it->second != (int)s.dims.size())
            throw std::runtime_error("kernel library '" + std::string(md_->name) + "' does not match model '" +
                                     m.name + "' (parameter " + s.name + "); rebuild it from this model file");
    }
}

float AotStepKernel::run(const Tensor &image, halide_buffer_t *labels_or_target, ParamStore &params,
                         Tensor &prediction, Tensor &grad_image) {
    // Views must outlive the call: keep them in a map keyed by argument name.
    std::map<std::string, Halide::Runtime::Buffer<float>> views;
    float loss_value = 0;
    Halide::Runtime::Buffer<float> loss(&loss_value, std::vector<int>{});
    views["image"] = image.view();
    views["loss"] = loss;
    views["prediction"] = prediction.view();
    views["grad_image"] = grad_image.view();
    const auto &specs = params.specs();
    for (size_t i = 0; i < specs.size(); i++) {
        views[c_name(specs[i].name)] = params.values[i].view();
        if (params.grads[i].defined()) views["grad_" + c_name(specs[i].name)] = params.grads[i].view();
    }
    void *uc = &ctx_;
    std::vector<void *> args(md_->num_arguments, nullptr);
    for (int i = 0; i < md_->num_arguments; i++) {
        const std::string name = md_->arguments[i].name;
        if (name == "__user_context") {
            args[i] = &uc;
        } else if (name == "labels" || name == "target") {
            args[i] = labels_or_target;
        } else {
            auto it = views.find(name);
            if (it == views.end()) throw std::runtime_error("kernel argument '" + name + "' has no buffer");
            args[i] = it->second.raw_buffer();
        }
    }
    ctx_.last_error.clear();
    if (int err = argv_(args.data()))
        throw std::runtime_error("training step kernel failed (" + std::to_string(err) + "): " + ctx_.last_error);
    return loss_value;
}

}  // namespace segtile
