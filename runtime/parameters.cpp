#include "runtime/parameters.h"

#include <cmath>
#include <random>

namespace segtile {

ParamStore::ParamStore(const Model &m, MemoryLedger *ledger, halide_type_t type) : specs_(m.params()) {
    for (const auto &s : specs_) {
        values.emplace_back(s.dims, ledger, MemoryLedger::Kind::Working, type);
        grads.push_back(s.trainable ? Tensor(s.dims, ledger, MemoryLedger::Kind::Working, type) : Tensor());
    }
}

void ParamStore::init_pytorch_default(uint64_t seed) {
    std::mt19937_64 rng(seed);
    int64_t fan_in = 1;  // of the last weight seen: biases follow their weight
    for (size_t i = 0; i < specs_.size(); i++) {
        const ParamSpec &s = specs_[i];
        Tensor &t = values[i];
        if (s.role == ParamRole::Weight && s.dims.size() > 1) {
            fan_in = 1;
            for (size_t d = 0; d + 1 < s.dims.size(); d++) fan_in *= s.dims[d];
        }
        if (s.init != ParamInit::Uniform) {
            t.fill(s.init == ParamInit::Ones ? 1.0f : 0.0f);
            continue;
        }
        const float bound = 1.0f / std::sqrt((float)fan_in);
        std::uniform_real_distribution<float> u(-bound, bound);
        if (t.type() == halide_type_of<double>())
            for (int64_t k = 0; k < t.numel(); k++) t.as<double>()[k] = u(rng);
        else
            for (int64_t k = 0; k < t.numel(); k++) t.data()[k] = u(rng);
    }
}

void ParamStore::zero_grads() {
    for (auto &g : grads)
        if (g.defined()) g.zero();
}

int64_t ParamStore::bytes() const {
    int64_t b = 0;
    for (const auto &v : values) b += v.bytes();
    for (const auto &g : grads) b += g.bytes();
    return b;
}

}  // namespace segtile
