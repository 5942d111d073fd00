#include "runtime/tensor.h"

#include <algorithm>

namespace segtile {

Tensor::Tensor(std::vector<int64_t> dims, MemoryLedger *ledger, MemoryLedger::Kind kind)
    : dims_(std::move(dims)), ledger_(ledger), kind_(kind) {
    numel_ = 1;
    for (int64_t d : dims_) numel_ *= d;
    data_.reset(new float[numel_]());
    if (ledger_) ledger_->allocated(bytes(), kind_);
}

Tensor::~Tensor() { release(); }

void Tensor::release() {
    if (data_ && ledger_) ledger_->freed(bytes(), kind_);
    data_.reset();
}

Tensor::Tensor(Tensor &&o) noexcept { *this = std::move(o); }

Tensor &Tensor::operator=(Tensor &&o) noexcept {
    if (this != &o) {
        release();
        dims_ = std::move(o.dims_);
        numel_ = o.numel_;
        data_ = std::move(o.data_);
        ledger_ = o.ledger_;
        kind_ = o.kind_;
        o.numel_ = 0;
    }
    return *this;
}

void Tensor::fill(float v) { std::fill(data_.get(), data_.get() + numel_, v); }

Halide::Runtime::Buffer<float> Tensor::view() const {
    std::vector<int> d(dims_.begin(), dims_.end());
    return Halide::Runtime::Buffer<float>(const_cast<float *>(data_.get()), d);
}

std::string shape_string(const std::vector<int64_t> &dims) {
    std::string s = "(";
    for (size_t i = 0; i < dims.size(); i++) s += (i ? ", " : "") + std::to_string(dims[i]);
    return s + ")";
}

}  // namespace segtile
