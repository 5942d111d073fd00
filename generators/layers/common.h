// Shared vocabulary of the layer families: every activation is a Func over
// (x, y, c, n), x innermost, the memory layout of PyTorch's NCHW. Vector
// tensors (after global pooling, flatten, dense) keep that shape with x = y = 0.
#pragma once

#include <string>

#include "Halide.h"
#include "spec/model.h"

namespace segtile::layers {

using Halide::Expr;
using Halide::Func;
using Halide::RDom;
using Halide::Type;
using Halide::Var;

struct Dims {
    Var x{"x"}, y{"y"}, c{"c"}, n{"n"};
};

inline Expr constant(Type t, double v) { return Halide::Internal::make_const(t, v); }

}  // namespace segtile::layers
