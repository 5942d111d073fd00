// Optimizers over a ParamStore, with PyTorch's update rules (torch.optim.SGD
// with momentum and weight decay; torch.optim.Adam), so runs match.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/parameters.h"

namespace segtile {

struct OptimizerConfig {
    std::string kind = "sgd";  // "sgd" or "adam"
    float lr = 0.01f;
    float momentum = 0.9f;       // sgd
    float weight_decay = 0.0f;
    float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;  // adam
};

class Optimizer {
public:
    Optimizer(const OptimizerConfig &cfg, const ParamStore &params, MemoryLedger *ledger);
    // One update of every trainable parameter from its gradient.
    void step(ParamStore &params);
    void set_lr(float lr) { cfg_.lr = lr; }
    const OptimizerConfig &config() const { return cfg_; }
    int64_t steps() const { return t_; }
    // Restores the step count of a saved run (Adam's bias correction and
    // SGD's first-step rule depend on it).
    void set_steps(int64_t t) { t_ = t; }
    // State tensors (momentum; Adam's first and second moments), for checkpoints.
    std::vector<Tensor> &state1() { return m1_; }
    std::vector<Tensor> &state2() { return m2_; }
    const std::vector<Tensor> &state1() const { return m1_; }
    const std::vector<Tensor> &state2() const { return m2_; }

private:
    OptimizerConfig cfg_;
    int64_t t_ = 0;
    std::vector<Tensor> m1_, m2_;
};

}  // namespace segtile
