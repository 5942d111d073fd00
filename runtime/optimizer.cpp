#include "runtime/optimizer.h"

#include <cmath>
#include <stdexcept>

namespace segtile {

Optimizer::Optimizer(const OptimizerConfig &cfg, const ParamStore &params, MemoryLedger *ledger) : cfg_(cfg) {
    if (cfg.kind != "sgd" && cfg.kind != "adam")
        throw std::invalid_argument("unknown optimizer '" + cfg.kind + "'; use sgd or adam");
    const bool adam = cfg.kind == "adam";
    for (size_t i = 0; i < params.specs().size(); i++) {
        const bool train = params.specs()[i].trainable;
        m1_.push_back(train ? Tensor(params.specs()[i].dims, ledger) : Tensor());
        m2_.push_back(train && adam ? Tensor(params.specs()[i].dims, ledger) : Tensor());
    }
}

void Optimizer::step(ParamStore &params) {
    t_++;
    const bool adam = cfg_.kind == "adam";
    const float bc1 = 1 - std::pow(cfg_.beta1, (float)t_), bc2 = 1 - std::pow(cfg_.beta2, (float)t_);
    for (size_t i = 0; i < params.values.size(); i++) {
        if (!params.grads[i].defined()) continue;
        float *w = params.values[i].data();
        const float *g = params.grads[i].data();
        float *m = m1_[i].data();
        const int64_t n = params.values[i].numel();
        if (!adam) {
            // torch.optim.SGD: buf = momentum * buf + g (buf = g at the first step); w -= lr * buf
            for (int64_t k = 0; k < n; k++) {
                float d = g[k] + cfg_.weight_decay * w[k];
                m[k] = t_ == 1 ? d : cfg_.momentum * m[k] + d;
                w[k] -= cfg_.lr * (cfg_.momentum != 0 ? m[k] : d);
            }
        } else {
            float *v = m2_[i].data();
            for (int64_t k = 0; k < n; k++) {
                float d = g[k] + cfg_.weight_decay * w[k];
                m[k] = cfg_.beta1 * m[k] + (1 - cfg_.beta1) * d;
                v[k] = cfg_.beta2 * v[k] + (1 - cfg_.beta2) * d * d;
                w[k] -= cfg_.lr * (m[k] / bc1) / (std::sqrt(v[k] / bc2) + cfg_.eps);
            }
        }
    }
}

}  // namespace segtile
