// generators/whole_vector_rows.h: a parameter's gradient summed over image
// rows of run-time width gets a row extent of whole vectors and the same
// values (float64: the extra columns add exact zeros); other Funcs are left
// alone.
#include <gtest/gtest.h>

#include <random>

#include "schedules/cpu_schedule.h"
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
    Func adjoint, grad;
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
    g.adjoint = w;
    g.grad = Func("grad_w");  // a parameter's gradient output reads its adjoint
    g.grad(kx, co) = w(kx, co);
    g.grad.bound(kx, 0, 3).bound(co, 0, 2);
    return g;
}

// The row RVar's extent is provably whole vectors of 8.
bool whole_rows(const Gradient &g) {
    return Halide::Internal::can_prove(g.adjoint.function().update(0).schedule().rvars()[0].extent % 8 == 0);
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
        EXPECT_TRUE(whole_rows(got));
        schedule_cpu({got.grad}, Halide::get_jit_target_from_environment());
        const Buffer<double> want = run(ref, width), have = run(got, width);
        have.for_each_element([&](int k, int c) { EXPECT_NEAR(have(k, c), want(k, c), 1e-12 * std::abs(want(k, c))) << width; });
    }
}

// Halide makes a repeated name unique: autodiff's adjoint of a copy p_w$4
// is "p_w$4_0_d_def__" as asked the first time, "p_w_4_0_d_def__$1" the
// next. Found by name, the first was missed (all after its '$' taken for
// Halide's suffix), and its rows ran a partial last vector; the adjoint
// is what the gradient output reads.
TEST(WholeVectorRows, FindsTheAdjointWhateverNameHalideGaveIt) {
    std::mt19937 rng(1);
    const Buffer<double> in = testing::random_buffer({23, 4}, rng), dout = testing::random_buffer({21, 4, 2}, rng);
    Gradient first = weight_gradient(in, dout, "p_w$4_0_d_def__");
    Gradient again = weight_gradient(in, dout, "p_w$4_0_d_def__");
    EXPECT_NE(again.adjoint.name(), "p_w$4_0_d_def__");  // renamed: the case under test
    for (Gradient *g : {&first, &again}) {
        EXPECT_EQ(whole_vector_rows({g->grad}, 8), 1) << g->adjoint.name();
        EXPECT_TRUE(whole_rows(*g)) << g->adjoint.name();
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
