// AOT generator of the untiled reference training step of a model file.
// Inputs and outputs depend on the model, so they are declared in configure():
//   inputs:  image (x, y, c, n); labels (n) int32 or target (x, y, c, n);
//            one buffer per parameter, named after PyTorch's name
//   outputs: loss (); prediction (x, y, c, n); grad_image (x, y, c, n);
//            grad_<param> per trainable parameter
#include "Halide.h"
#include "generators/model_graph.h"
#include "generators/training_step.h"
#include "spec/model.h"

namespace {

using namespace Halide;

class TrainingStepGenerator : public Generator<TrainingStepGenerator> {
public:
    GeneratorParam<std::string> model_file{"model_file", ""};
    GeneratorParam<Type> precision{"precision", Float(32)};

    void configure() {
        model_ = segtile::load_model_file(model_file);
        const Type t = precision;
        image_ = add_input<Buffer<>>("image", t, 4);
        const bool ce = model_.loss.kind == segtile::LossKind::SoftmaxCrossEntropy;
        labels_ = ce ? add_input<Buffer<>>("labels", Int(32), 1) : add_input<Buffer<>>("target", t, 4);
        for (const auto &s : model_.params())
            params_.push_back(add_input<Buffer<>>(segtile::halide_name(s.name), t, (int)s.dims.size()));
        loss_ = add_output<Buffer<>>("loss", t, 0);
        prediction_ = add_output<Buffer<>>("prediction", t, 4);
        grad_image_ = add_output<Buffer<>>("grad_image", t, 4);
        for (const auto &s : model_.params())
            if (s.trainable) grads_.push_back(add_output<Buffer<>>("grad_" + segtile::halide_name(s.name), t, (int)s.dims.size()));
    }

    void generate() {
        segtile::StepInputs in;
        in.image = *image_;
        in.width = image_->dim(0).extent();
        in.height = image_->dim(1).extent();
        in.batch = image_->dim(3).extent();
        (model_.loss.kind == segtile::LossKind::SoftmaxCrossEntropy ? in.labels : in.target) = *labels_;
        for (auto *p : params_) in.params.push_back(*p);
        segtile::StepOutputs out = segtile::build_training_step(model_, in, precision);
        *loss_ = out.loss;
        *prediction_ = out.prediction;
        *grad_image_ = out.grad_image;
        size_t k = 0;
        for (const auto &g : out.grads)
            if (g.defined()) *grads_[k++] = g;
        std::vector<Func> all = {out.loss, out.prediction, out.grad_image};
        for (const auto &g : out.grads)
            if (g.defined()) all.push_back(g);
        segtile::schedule_reference(all);
    }

private:
    segtile::Model model_;
    GeneratorInput<Buffer<>> *image_ = nullptr, *labels_ = nullptr;
    std::vector<GeneratorInput<Buffer<>> *> params_;
    GeneratorOutput<Buffer<>> *loss_ = nullptr, *prediction_ = nullptr, *grad_image_ = nullptr;
    std::vector<GeneratorOutput<Buffer<>> *> grads_;
};

}  // namespace

HALIDE_REGISTER_GENERATOR(TrainingStepGenerator, segtile_training_step)
