#include "apps/jit_step_kernel.h"

namespace segtile {

namespace {
Halide::Buffer<> wrap(const Tensor &t) {
    std::vector<int> d(t.dims().begin(), t.dims().end());
    return Halide::Buffer<float>(const_cast<float *>(t.data()), d);
}
void copy_into(const Halide::Buffer<> &src, Tensor &dst) {
    Halide::Buffer<float> s(src);
    std::copy(s.begin(), s.end(), dst.data());
}
}  // namespace

float JitStepKernel::run(const Tensor &image, halide_buffer_t *labels_or_target, ParamStore &params,
                         Tensor &prediction, Tensor &grad_image) {
    std::vector<Halide::Buffer<>> ps;
    for (const auto &v : params.values) ps.push_back(wrap(v));
    auto r = step_.run(wrap(image), Halide::Buffer<>(*labels_or_target), ps);
    copy_into(r.prediction, prediction);
    copy_into(r.grad_image, grad_image);
    for (size_t i = 0; i < specs_.size(); i++)
        if (params.grads[i].defined()) copy_into(r.grads[i], params.grads[i]);
    return (float)r.loss;
}

}  // namespace segtile
