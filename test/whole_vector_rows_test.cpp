// generators/whole_vector_rows.h: a parameter's gradient summed over image
// rows of run-time width gets a row extent of whole vectors and the same
// values (float64: the extra columns add exact zeros); other Funcs are left
// alone.
#include <gtest/gtest.h>

#include <random>

#include "autoscheduler/cpu_schedule.h"
#include "generators/whole_vector_rows.h"
#include "test/test_support.h"

namespace segtile {
namespace {

using Halide::Buffer;
using Halide::Expr;
using Halide::Func;
using Halide::Var;

// A weight gradient's shape: d_w(kx, co) = sum over x < width, y of
// d_out(x, y, co) * src(x + kx, y), the sources bounded copies (clamped
// reads, zero outside) as segtile's kernels read them.
struct Gradient {
    Func grad;
    Halide::Param<int> width{"width"};
};

Gradient weight_gradient(const Buffer<double> &in, const Buffer<double> &dout, const std::string &name) {
    Var x("x"), y("y"), kx("kx"), co("co");
    Gradient g;
    const Expr zero = Halide::Internal::make_zero(Halide::Float(64));
    auto bounded = [&](const Buffer<double> &b, const std::string &n) {
        Func f(n);
        std::vector<Expr> at;
        for (int d = 0; d < b.dimensions(); d++) at.push_back(Halide::clamp(Var::implicit(d), 0, b.dim(d).extent() - 1));
        Expr inside = Var::implicit(0) >= 0 && Var::implicit(0) < b.dim(0).extent();
        f(Halide::_) = Halide::select(inside, b(at), zero);
        return f;
    };
    Func src = bounded(in, "src"), d = bounded(dout, "d_out");
    Halide::RDom r(0, g.width, 0, in.dim(1).extent(), "r");
    Func w(name);
    w(kx, co) = zero;
    w(kx, co) += d(r.x, r.y, co) * src(r.x + kx, r.y);
    g.grad = Func("grad");
    g.grad(kx, co) = w(kx, co);
    g.grad.bound(kx, 0, 3).bound(co, 0, 2);
    return g;
}

Buffer<double> run(Gradient &g, int width) {
    g.width.set(width);
    return g.grad.realize({3, 2}, Halide::get_jit_target_from_environment());
}

TEST(WholeVectorRows, RowsOfWholeVectorsGiveTheSameGradient) {
    std::mt19937 rng(1);
    const Buffer<double> in = testing::random_buffer({23, 4}, rng), dout = testing::random_buffer({21, 4, 2}, rng);
    for (int width : {3, 8, 13, 21}) {
        Gradient ref = weight_gradient(in, dout, "p_w_0_d_def__");
        Gradient got = weight_gradient(in, dout, "p_w_0_d_def__");
        ASSERT_EQ(whole_vector_rows({got.grad}, 8), 1);
        // The row RVar's extent is now provably whole vectors.
        for (const auto &[name, fn] : Halide::Internal::build_environment({got.grad.function()}))
            if (name == "p_w_0_d_def__")
                EXPECT_TRUE(Halide::Internal::can_prove(fn.update(0).schedule().rvars()[0].extent % 8 == 0));
        schedule_cpu({got.grad}, Halide::get_jit_target_from_environment());
        const Buffer<double> want = run(ref, width), have = run(got, width);
        have.for_each_element([&](int k, int c) { EXPECT_NEAR(have(k, c), want(k, c), 1e-12 * std::abs(want(k, c))) << width; });
    }
}

TEST(WholeVectorRows, LeavesOtherReductionsAlone) {
    std::mt19937 rng(1);
    const Buffer<double> in = testing::random_buffer({23, 4}, rng), dout = testing::random_buffer({21, 4, 2}, rng);
    Gradient tensor = weight_gradient(in, dout, "l_conv_0_d_def__");  // not a parameter's adjoint
    EXPECT_EQ(whole_vector_rows({tensor.grad}, 8), 0);
}

}  // namespace
}  // namespace segtile
