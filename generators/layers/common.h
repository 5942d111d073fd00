// Shared vocabulary of the layer families: every activation is a Func over
// (x, y, c, n), x innermost, the memory layout of PyTorch's NCHW. Vector
// tensors (after global pooling, flatten, dense) keep that shape with x = y = 0.
#pragma once

#include <string>
#include <vector>

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

// What a layer kind's builder gets (generators/model_graph.cpp fills it).
struct LayerArgs {
    const Layer &layer;
    std::vector<Func> ins;           // one per input, zero outside its region
    std::vector<int> in_channels;    // of each input
    std::vector<Func> params;        // the layer's, in its row's params() order (spec/layer_kinds.cpp)
    Expr in_width, in_height;        // whole-image extent of the first input
    Type t;
    std::string name;                // the Func's name
    Func param(size_t k) const { return k < params.size() ? params[k] : Func(); }
};

// A kind's forward Func: one row per kind, beside its Func in the family's header.
struct LayerBuilder {
    LayerKind kind;
    Func (*build)(const LayerArgs &);
};

}  // namespace segtile::layers
