// Tensor: an owning float32 array with Halide dims (innermost first), its
// bytes counted in a MemoryLedger, viewable as a halide_buffer_t for kernels.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "HalideBuffer.h"
#include "runtime/memory_ledger.h"

namespace segtile {

class Tensor {
public:
    Tensor() = default;
    Tensor(std::vector<int64_t> dims, MemoryLedger *ledger, MemoryLedger::Kind kind = MemoryLedger::Kind::Working);
    ~Tensor();
    Tensor(Tensor &&o) noexcept;
    Tensor &operator=(Tensor &&o) noexcept;
    Tensor(const Tensor &) = delete;
    Tensor &operator=(const Tensor &) = delete;

    const std::vector<int64_t> &dims() const { return dims_; }
    int64_t numel() const { return numel_; }
    int64_t bytes() const { return numel_ * (int64_t)sizeof(float); }
    float *data() { return data_.get(); }
    const float *data() const { return data_.get(); }
    bool defined() const { return (bool)data_; }
    void fill(float v);

    // A non-owning view for Halide kernels (dense, min 0 in every dim).
    Halide::Runtime::Buffer<float> view() const;

private:
    void release();
    std::vector<int64_t> dims_;
    int64_t numel_ = 0;
    std::unique_ptr<float[]> data_;
    MemoryLedger *ledger_ = nullptr;
    MemoryLedger::Kind kind_ = MemoryLedger::Kind::Working;
};

std::string shape_string(const std::vector<int64_t> &dims);

}  // namespace segtile
