// A Halide user's generator that knows nothing of segtile: the blur chain
// of test_pipelines, scheduled at build time by whatever autoscheduler the
// command line names (here: Segtile, through add_halide_library).
#include "Halide.h"
#include "test/plugin/test_pipelines.h"

namespace {

class BlurChain : public Halide::Generator<BlurChain> {
public:
    GeneratorParam<int> width{"width", 192};
    GeneratorParam<int> height{"height", 160};
    Input<Halide::Buffer<float, 2>> input{"input"};
    Output<Halide::Buffer<float, 2>> output{"output"};

    void generate() {
        Halide::Var x, y;
        Halide::Func blurred = segtile::plugin_test::blur_chain(Halide::BoundaryConditions::repeat_edge(input), 8);
        output(x, y) = blurred(x, y);
        input.set_estimates({{0, width}, {0, height}});
        output.set_estimates({{0, width}, {0, height}});
    }
};

}  // namespace

HALIDE_REGISTER_GENERATOR(BlurChain, segtile_plugin_blur_chain)
