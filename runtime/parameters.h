// ParamStore: the model's parameters and their gradients as Tensors, in
// m.params() order, initialised as PyTorch initialises its modules.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/tensor.h"
#include "spec/model.h"

namespace segtile {

class ParamStore {
public:
    ParamStore(const Model &m, MemoryLedger *ledger, halide_type_t type = halide_type_of<float>());

    // torch.nn defaults: conv/dense weights and biases U(-1/sqrt(fan_in), 1/sqrt(fan_in))
    // (kaiming_uniform with a = sqrt(5)); batch norm weight 1, bias 0, mean 0, var 1.
    void init_pytorch_default(uint64_t seed);
    void zero_grads();
    int64_t bytes() const;  // values and gradients

    const std::vector<ParamSpec> &specs() const { return specs_; }
    std::vector<Tensor> values;  // one per spec
    std::vector<Tensor> grads;   // one per spec; undefined for buffers (running statistics)

private:
    std::vector<ParamSpec> specs_;
};

}  // namespace segtile
