// A small classification model with a conv, a batch norm and a dense head,
// so weight files carry every kind of parameter PyTorch names.
#pragma once

#include "spec/builder.h"

namespace segtile::testing {

// features.0: Conv2d(3, 4, 3); features.1: BatchNorm2d(4); classifier: Linear(4, 3)
inline Model small_classifier(int out_channels = 4) {
    return ModelBuilder("small", 3)
        .conv2d("conv", out_channels, 3)
        .params("features.0")
        .batch_norm("bn")
        .params("features.1")
        .relu("relu")
        .global_avg_pool("gap")
        .flatten("flat")
        .dense("fc", 3)
        .params("classifier")
        .loss(LossKind::SoftmaxCrossEntropy)
        .build();
}

}  // namespace segtile::testing
