// generators/unclamp_adjoints.h: autodiff's scatter for a bounded tensor
// becomes an injective update that vectorises, with gradients equal to
// the unrewritten ones (float64; only zero additions go, so they differ by
// no more than the vectorised schedule's rounding), then one pure Func
// with the same gradients, and updates whose dropped writes would not add
// zero are left alone. A max pool's adjoint over non-overlapping windows
// becomes one pure Func too; over overlapping ones it stays a scatter.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "schedules/cpu_schedule.h"
#include "generators/layers/pooling.h"
#include "generators/unclamp_adjoints.h"

namespace segtile {
namespace {

using Halide::Buffer;
using Halide::Expr;
using Halide::Func;
using Halide::Var;

// in(x, y, c) read through g = select(cond, src(clamp(x), clamp(y), c), 0)
// with the clamps' window [2, 9] x [1, 6]; the loss sums w * g^2 over
// [-3, 14] x [-2, 10] (and w * g), a region larger than the window, so clamped writes
// of the scatter collide at its edges.
struct Pipeline {
    Func src, loss, grad;
};

Pipeline bounded_pipeline(const Buffer<double> &in, const Buffer<double> &w, bool exact_condition) {
    Var x("x"), y("y"), c("c");
    const int x0 = 2, x1 = 9, y0 = 1, y1 = 6;
    Pipeline p;
    const Expr zero = Halide::Internal::make_zero(Halide::Float(64));
    p.src = Func("src");
    p.src(x, y, c) = in(x, y, c);
    // exact_condition: the window itself (model_graph.cpp's bounded());
    // otherwise a condition that does not imply it (x >= 0 only).
    Expr inside = exact_condition ? (x >= x0 && x <= x1 && y >= y0 && y <= y1) : (x >= 0);
    Func g("g");
    g(x, y, c) = Halide::select(inside, p.src(Halide::clamp(x, x0, x1), Halide::clamp(y, y0, y1), c), zero);
    Halide::RDom r(-3, 18, -2, 13, 0, 2);
    p.loss = Func("loss");
    p.loss() = zero;
    // Linear in g too: the adjoint of g is nonzero outside the window.
    const Expr gr = g(r.x, r.y, r.z);
    p.loss() += w(r.x + 3, r.y + 2, r.z) * gr * (gr + Halide::cast<double>(1));
    p.grad = Halide::propagate_adjoints(p.loss)(p.src);
    return p;
}

Buffer<double> random(std::vector<int> dims, int seed) {
    Buffer<double> b(dims);
    std::mt19937 rng(seed);
    std::normal_distribution<double> nd;
    b.for_each_value([&](double &v) { v = nd(rng); });
    return b;
}

// Elements of `got` farther than rounding (1e-14 relative) from `want`.
int elements_differing(const Buffer<double> &got, const Buffer<double> &want) {
    int differ = 0;
    got.for_each_element([&](int x, int y, int c) {
        differ += std::abs(got(x, y, c) - want(x, y, c)) > 1e-14 * std::abs(want(x, y, c));
    });
    return differ;
}

// The scatter's LHS as text, for the checks below.
std::string scatter_lhs(const Func &grad) {
    std::ostringstream o;
    for (const auto &[name, fn] : Halide::Internal::build_environment({grad.function()}))
        if (name.rfind("src", 0) == 0 && !fn.updates().empty())
            for (const auto &a : fn.update(0).args()) o << "[" << a << "]";
    return o.str();
}

TEST(UnclampAdjoints, BoundedScatterVectorisesWithTheSameGradient) {
    const Buffer<double> in = random({12, 8, 2}, 1), w = random({18, 13, 2}, 2);
    Pipeline want = bounded_pipeline(in, w, true);
    Buffer<double> expected = want.grad.realize({12, 8, 2});

    Pipeline got = bounded_pipeline(in, w, true);
    EXPECT_NE(scatter_lhs(got.grad).find("max(min("), std::string::npos) << "autodiff's scatter is clamped";
    EXPECT_EQ(unclamp_bounded_adjoints({got.grad}), 1);
    EXPECT_EQ(scatter_lhs(got.grad).find("max(min("), std::string::npos) << scatter_lhs(got.grad);
    // Halide now accepts the RVar over x in vector lanes (it refuses a
    // race otherwise) and the CPU schedule vectorises it.
    schedule_cpu({got.grad}, Halide::get_jit_target_from_environment());
    Buffer<double> result = got.grad.realize({12, 8, 2});
    EXPECT_EQ(elements_differing(result, expected), 0);
    // The window's edges got the collided writes: nonzero gradient there.
    EXPECT_NE(expected(2, 1, 0), 0.0);
    EXPECT_EQ(expected(0, 0, 0), 0.0);
}

// Functions reachable from f that have update definitions and are named
// like src's adjoint.
int src_adjoints_with_updates(const Func &f) {
    int n = 0;
    for (const auto &[name, fn] : Halide::Internal::build_environment({f.function()}))
        n += name.rfind("src", 0) == 0 && !fn.updates().empty();
    return n;
}

TEST(UnclampAdjoints, ZeroPlusOneInjectiveUpdateBecomesOnePureFunc) {
    const Buffer<double> in = random({12, 8, 2}, 5), w = random({18, 13, 2}, 6);
    Pipeline want = bounded_pipeline(in, w, true);
    Buffer<double> expected = want.grad.realize({12, 8, 2});

    // As in segtile's kernels, the adjoint is read by an output copy.
    Pipeline got = bounded_pipeline(in, w, true);
    Var x("x"), y("y"), c("c");
    Func out("out");
    out(x, y, c) = got.grad(x, y, c);
    ASSERT_EQ(unclamp_bounded_adjoints({out}), 1);
    EXPECT_EQ(src_adjoints_with_updates(out), 1);
    EXPECT_EQ(pure_pointwise_adjoints({out}), 1);
    EXPECT_EQ(src_adjoints_with_updates(out), 0) << "the zero fill and the update are gone";
    // An output itself is never replaced (its callers are the caller's).
    EXPECT_EQ(pure_pointwise_adjoints({got.grad}), 0);

    schedule_cpu({out}, Halide::get_jit_target_from_environment());
    Buffer<double> result = out.realize({12, 8, 2});
    EXPECT_EQ(elements_differing(result, expected), 0);
    // Inside the window and outside it (the select's zero).
    EXPECT_NE(result(2, 1, 0), 0.0);
    EXPECT_EQ(result(0, 0, 0), 0.0);
    EXPECT_EQ(result(11, 7, 1), 0.0);
}

// d(r, r) += v(r) writes a diagonal: one RVar at two LHS positions is
// not a point per (x, y), so it keeps its zero fill and update, and the
// result stays the diagonal (a pure form would fill every row).
TEST(UnclampAdjoints, LeavesAnUpdateWritingOneRVarAtTwoPositions) {
    Var x("x"), y("y");
    Func v("v"), d("d"), out("out");
    v(x) = Halide::cast<double>(x + 1);
    d(x, y) = Halide::Internal::make_zero(Halide::Float(64));
    Halide::RDom r(0, 4);
    d(r, r) = d(r, r) + v(r);
    out(x, y) = d(x, y);
    EXPECT_EQ(pure_pointwise_adjoints({out}), 0);
    Buffer<double> result = out.realize({4, 4});
    EXPECT_EQ(result(2, 2), 3.0);
    EXPECT_EQ(result(2, 1), 0.0);
}

TEST(UnclampAdjoints, LeavesScattersWhoseDroppedWritesAreNotZero) {
    const Buffer<double> in = random({12, 8, 2}, 3), w = random({18, 13, 2}, 4);
    Pipeline want = bounded_pipeline(in, w, false);
    Buffer<double> expected = want.grad.realize({12, 8, 2});
    Pipeline got = bounded_pipeline(in, w, false);
    EXPECT_EQ(unclamp_bounded_adjoints({got.grad}), 0);
    EXPECT_NE(scatter_lhs(got.grad).find("max(min("), std::string::npos);
    Buffer<double> result = got.grad.realize({12, 8, 2});
    // Outside x >= 0 nothing is added; inside, the edges of the window
    // collect the writes of every clamped point beyond them.
    EXPECT_DOUBLE_EQ(result(9, 3, 1), expected(9, 3, 1));
    EXPECT_NE(expected(9, 3, 1), 0.0);
}

// in (W, H, C) max-pooled (kernel k, stride s), the loss sums w * out^2:
// the input's gradient through autodiff's scatter for the pool.
Func pooled_gradient(const Buffer<double> &in, const Buffer<double> &w, int k, int s, int out_w, int out_h) {
    Var x("x"), y("y"), c("c"), n("n");
    Func src("src");
    src(x, y, c, n) = in(Halide::clamp(x, 0, in.width() - 1), Halide::clamp(y, 0, in.height() - 1), c);
    Layer l;
    l.kind = LayerKind::MaxPool;
    l.kernel = k;
    l.stride = s;
    const Func out = layers::max_pool(src, l, in.width(), in.height(), Halide::Float(64), "pool");
    Halide::RDom r(0, out_w, 0, out_h, 0, in.channels());
    Func loss("loss");
    loss() = Halide::Internal::make_zero(Halide::Float(64));
    const Expr o = out(r.x, r.y, r.z, 0);
    loss() += w(r.x, r.y, r.z) * o * o;
    Func grad("grad");
    grad(x, y, c) = Halide::propagate_adjoints(loss)(src)(x, y, c, 0);
    return grad;
}

// Funcs with update definitions among those f reaches.
int funcs_with_updates(const Func &f) {
    int n = 0;
    for (const auto &[name, fn] : Halide::Internal::build_environment({f.function()})) n += !fn.updates().empty();
    return n;
}

TEST(UnclampAdjoints, MaxPoolOverNonOverlappingWindowsBecomesOnePureFunc) {
    // 2x2 stride 2 over 13 x 10: the last column is in no window (gradient 0).
    const Buffer<double> in = random({13, 10, 3}, 7), w = random({6, 5, 3}, 8);
    Buffer<double> expected = pooled_gradient(in, w, 2, 2, 6, 5).realize({13, 10, 3});
    Func got = pooled_gradient(in, w, 2, 2, 6, 5);
    const int before = funcs_with_updates(got);
    EXPECT_EQ(pure_pointwise_adjoints({got}), 1);
    EXPECT_EQ(funcs_with_updates(got), before - 1) << "the pool's scatter is gone";
    schedule_cpu({got}, Halide::get_jit_target_from_environment());
    Buffer<double> result = got.realize({13, 10, 3});
    EXPECT_EQ(elements_differing(result, expected), 0);
    // One tap per window gets the gradient (2 w out, nonzero), the rest 0.
    int nonzero = 0;
    result.for_each_value([&](double v) { nonzero += v != 0.0; });
    EXPECT_EQ(nonzero, 6 * 5 * 3);
    for (int y = 0; y < 10; y++) EXPECT_EQ(result(12, y, 0), 0.0);
}

TEST(UnclampAdjoints, LeavesMaxPoolOverOverlappingWindows) {
    // 3x3 stride 2: a pixel can be the maximum of two windows, its
    // gradient the sum of both; a pure form would keep one.
    const Buffer<double> in = random({11, 9, 2}, 9), w = random({5, 4, 2}, 10);
    Buffer<double> expected = pooled_gradient(in, w, 3, 2, 5, 4).realize({11, 9, 2});
    Func got = pooled_gradient(in, w, 3, 2, 5, 4);
    EXPECT_EQ(pure_pointwise_adjoints({got}), 0);
    Buffer<double> result = got.realize({11, 9, 2});
    EXPECT_EQ(elements_differing(result, expected), 0);
}

}  // namespace
}  // namespace segtile
