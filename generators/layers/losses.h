// Losses, reduced to a scalar Func: softmax cross-entropy over class labels
// and mean squared error against a dense target. Both average over the batch
// (and, for mse, over every element), as PyTorch's defaults do.
#pragma once

#include <functional>

#include "generators/layers/common.h"

namespace segtile::layers {

// logits: (0, 0, k, n); labels: (n) int32 in [0, classes).
inline Func softmax_cross_entropy(const Func &logits, const Func &labels, int classes, Expr batch, Type t,
                                  const std::string &name) {
    Var n("n");
    // Max over classes for a stable log-sum-exp, as a balanced tree of
    // max() over the taps: Halide cannot differentiate maximum() or an
    // in-place max update. (Any shift gives the same loss and gradient.)
    std::function<Expr(int, int)> tree = [&](int lo, int hi) -> Expr {
        if (lo == hi) return logits(0, 0, lo, n);
        int mid = (lo + hi) / 2;
        return Halide::max(tree(lo, mid), tree(mid + 1, hi));
    };
    Func m(name + "_max");
    m(n) = tree(0, classes - 1);
    RDom k(0, classes, name + "_k");
    Func se(name + "_sumexp"), picked(name + "_picked");
    se(n) = constant(t, 0);
    se(n) += Halide::exp(logits(0, 0, k, n) - m(n));
    picked(n) = constant(t, 0);
    picked(n) += Halide::select(k == labels(n), logits(0, 0, k, n), constant(t, 0));
    RDom b(0, batch, name + "_b");
    Func loss(name);
    loss() = constant(t, 0);
    loss() += (Halide::log(se(b)) + m(b) - picked(b)) / Halide::cast(t, batch);
    return loss;
}

// pred, target: (x, y, c, n) over width x height x channels x batch.
inline Func mean_squared_error(const Func &pred, const Func &target, Expr width, Expr height, int channels,
                               Expr batch, Type t, const std::string &name) {
    RDom r(0, width, 0, height, 0, channels, 0, batch, name + "_r");
    Expr d = pred(r.x, r.y, r.z, r.w) - target(r.x, r.y, r.z, r.w);
    Func loss(name);
    loss() = constant(t, 0);
    loss() += d * d / Halide::cast(t, width * height * channels * batch);
    return loss;
}

}  // namespace segtile::layers
