// Pipelines that segtile did not write for itself, to schedule with the
// Segtile plugin: a chain of 3x3 blurs, a local-Laplacian-like pyramid and
// a Halide autodiff gradient pipeline. Each call builds fresh Funcs (a
// schedule, once applied, stays on them), with estimates on every output.
#pragma once

#include <string>
#include <vector>

#include "Halide.h"

namespace segtile::plugin_test {

struct TestPipeline {
    std::vector<Halide::Func> outputs;
    std::vector<std::vector<int>> output_sizes;  // extents per output, as estimated
};

// `stages` 3x3 box blurs of `input` (which must be defined everywhere).
Halide::Func blur_chain(const Halide::Func &input, int stages);

TestPipeline blur_chain_pipeline(int width, int height, int stages);
TestPipeline pyramid_pipeline(int width, int height, int levels);
TestPipeline conv_relu_gradient_pipeline(int width, int height, int channels);

TestPipeline make_pipeline(const std::string &name);

// Every Func of the pipeline at root: the reference schedule.
void schedule_all_root(const std::vector<Halide::Func> &outputs);

}  // namespace segtile::plugin_test
