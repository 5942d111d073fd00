#include "schedules/cpu_schedule.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "schedules/conv_shape.h"
#include "schedules/parameter_adjoints.h"
#include "schedules/schedule_primitives.h"

namespace segtile {

using Halide::Expr;
using Halide::Func;
using Halide::RVar;
using Halide::Stage;
using Halide::TailStrategy;
using Halide::Var;
using Halide::VarOrRVar;
using Halide::Internal::expr_uses_var;

namespace {

using schedule::debug;
using schedule::kTail;
using schedule::unqualified;
using schedule::constant_extent;
using schedule::conv_shaped;
using schedule::reduction_by_extent;

// Per LHS position of an update: the name of the Var there if it is a Var
// (not an RVar) that no other LHS argument uses, else "". Distinct values of
// such a Var write distinct elements, so its loop may run in parallel or in
// vector lanes. RVars and the index expressions of autodiff's scatters
// (2 * r.x + 1, clamps) may collide: those loops stay serial.
std::vector<std::string> safe_pure_positions(const std::vector<Expr> &lhs) {
    std::vector<std::string> names(lhs.size());
    for (size_t i = 0; i < lhs.size(); i++) {
        const auto *v = lhs[i].as<Halide::Internal::Variable>();
        if (!v || v->reduction_domain.defined() || v->param.defined() || v->image.defined()) continue;
        bool elsewhere = false;
        for (size_t j = 0; j < lhs.size(); j++) elsewhere = elsewhere || (j != i && expr_uses_var(lhs[j], v->name));
        if (!elsewhere) names[i] = v->name;
    }
    return names;
}

std::vector<std::string> nonempty(const std::vector<std::string> &v, size_t from = 0) {
    std::vector<std::string> out;
    for (size_t i = from; i < v.size(); i++)
        if (!v[i].empty()) out.push_back(v[i]);
    return out;
}

// Splits pure Var `vec` by the vector width into vector lanes, innermost
// (inside an update's reduction loops: each tap is then one vector
// multiply-add on contiguous elements; moving a pure Var is always legal).
void vectorise(Stage s, const std::string &vec, int width) {
    Var v(vec), vo(vec + "_vo"), vi(vec + "_vi");
    s.split(v, vo, vi, width, kTail).vectorize(vi);
    std::vector<VarOrRVar> order{vi};
    for (const auto &d : s.get_schedule().dims()) {
        const std::string n = unqualified(d.var);
        if (n != vi.name() && n != Var::outermost().name()) order.emplace_back(n, d.is_rvar());
    }
    s.reorder(order);
}

// An RVar standing bare at LHS position 0 whose loop Halide knows to be
// pure (each of its values writes its own element: the adjoints that
// generators/unclamp_adjoints.h rewrites), or "".
std::string pure_rvar_at_0(const Stage &s, const std::vector<Expr> &lhs) {
    const auto *v = lhs.empty() ? nullptr : lhs[0].as<Halide::Internal::Variable>();
    if (!v || !v->reduction_domain.defined()) return "";
    for (const auto &d : s.get_schedule().dims())
        if (d.var == v->name && d.dim_type == Halide::Internal::DimType::PureRVar) return v->name;
    return "";
}

// Fuses pure Vars `par` (innermost first, adjacent in the loop nest as
// they are by default) into one parallel loop: tile and image extents are
// unknown here, so take all the outer parallelism there is (rows, channels,
// batch); Halide's thread pool balances the tasks.
std::string parallelise(Stage s, const std::vector<std::string> &par) {
    if (par.empty()) return "";
    Var fused(par[0]);
    for (size_t i = 1; i < par.size(); i++) {
        Var next(par[i] + "_f");
        s.fuse(fused, Var(par[i]), next);
        fused = next;
    }
    s.parallel(fused);
    return fused.name();
}

// The innermost RVar that no LHS argument uses: a true reduction dimension
// (not a scatter index). Sets `constant` to whether its extent is a
// compile-time constant (a kernel's taps) or a run-time one (an image).
std::string reduction_rvar(const Stage &s, const std::vector<Expr> &lhs, bool &constant) {
    for (const auto &r : s.get_schedule().rvars()) {
        bool in_lhs = false;
        for (const auto &e : lhs) in_lhs = in_lhs || expr_uses_var(e, r.var);
        if (in_lhs) continue;
        constant = Halide::Internal::is_const(r.extent);
        return r.var;
    }
    return "";
}

// A reduction over an image (a weight gradient: autodiff writes it as
// dw(kx, ky, ci, co) += sum over image x, y, n; a bias gradient; a global
// pool) or one whose innermost storage dimension is a scatter: vectorising
// a pure Var would run 3-wide kernel taps or gather channels across whole
// images. Instead (Li2018 does the same with outer parts) split the
// innermost reduction RVar, image x, by the vector width and rfactor the
// inner part into a pure Var u: the intermediate, stored u-innermost,
// accumulates vectors of independent partial sums over contiguous pixels;
// the update left only adds up `width` partials. rfactor proves the update
// an associative reduction and throws otherwise (then nothing is changed
// but a split, and the caller falls back).
Func rfactor_reduction(Func f, int k, const std::string &r, int width) {
    Stage s = f.update(k);
    Var u(f.name() + "_u");
    Func intm;
    try {
        s.split(RVar(r), RVar(r + "_ro"), RVar(r + "_ri"), width, kTail);
        intm = s.rfactor(RVar(r + "_ri"), u);
    } catch (const Halide::Error &e) {
        if (debug()) std::fprintf(stderr, "schedule_cpu: no rfactor for %s: %s\n", f.name().c_str(), e.what());
        return Func();
    }
    std::vector<Var> storage{u};
    std::vector<std::string> rest;
    for (const auto &a : intm.args())
        if (a.name() != u.name()) {
            storage.push_back(a);
            rest.push_back(a.name());
        }
    intm.compute_root();  // unless placed per output channel below
    if (storage.size() > 1) intm.reorder_storage(storage);
    vectorise(intm, u.name(), width);

    // Loop nest of the intermediate's update, innermost first: u's lanes,
    // image x (outer part), the pure Vars but the last (kernel taps and
    // input channels: the rows just read stay in cache for all of them),
    // the other RVars (image y, batch), then the last pure Var (output
    // channel) in parallel: each task owns its own slice of weights.
    Stage is = intm.update(0);
    const auto pure = nonempty(safe_pure_positions(intm.update_args(0)));
    std::vector<std::string> inner_pure, rvars;
    for (const auto &p : pure)
        if (p != u.name()) inner_pure.push_back(p);
    std::string last;
    if (!inner_pure.empty()) {
        last = inner_pure.back();
        inner_pure.pop_back();
    }
    vectorise(is, u.name(), width);
    for (const auto &d : is.get_schedule().dims())
        if (d.is_rvar()) rvars.push_back(unqualified(d.var));
    std::vector<VarOrRVar> order{Var(u.name() + "_vi")};
    if (!rvars.empty()) order.emplace_back(RVar(rvars[0]));
    for (const auto &p : inner_pure) order.emplace_back(Var(p));
    for (size_t i = 1; i < rvars.size(); i++) order.emplace_back(RVar(rvars[i]));
    if (!last.empty()) order.emplace_back(Var(last));
    // Pure Vars that a scatter LHS leaves out keep their place (after these).
    if (order.size() > 1) is.reorder(order);
    if (!last.empty()) is.parallel(Var(last));  // at root; the caller may move it inside f
    if (debug()) std::fprintf(stderr, "schedule_cpu: rfactor %s.update(%d) over %s\n", f.name().c_str(), k, r.c_str());
    return intm;
}

// An autodiff scatter: the adjoint of a gather such as a convolution's
// input, d_in(r_x - p + r_kx, r_y - p + r_ky, r_c, n) += ..., whose LHS holds
// only RVars. For fixed kernel taps, distinct r_x write distinct elements,
// so the RVar over the consumer's x (run-time extent, in LHS position 0) can
// run in vector lanes, and an RVar standing alone at a channel position can
// run in parallel. Halide proves both (or refuses at lowering, which the
// caller's compile reports); returns false when the pattern is absent.
bool schedule_scatter(Func f, int k, const std::vector<Expr> &lhs, int width) {
    if (lhs.size() < 3) return false;
    Stage s = f.update(k);
    std::string vec, par;
    std::vector<std::string> rvars;
    for (const auto &r : s.get_schedule().rvars()) rvars.push_back(r.var);
    for (const auto &r : s.get_schedule().rvars()) {
        if (!Halide::Internal::is_const(r.extent) && expr_uses_var(lhs[0], r.var) && vec.empty()) vec = r.var;
        for (size_t i = 2; i < lhs.size(); i++) {
            const auto *v = lhs[i].as<Halide::Internal::Variable>();
            if (v && v->name == r.var && par.empty()) par = r.var;
        }
    }
    if (vec.empty()) return false;
    // Loop order: vec innermost, the other RVars in their order, par outermost.
    std::vector<VarOrRVar> order{RVar(vec)};
    for (const auto &r : rvars)
        if (r != vec && r != par) order.emplace_back(RVar(r));
    if (!par.empty()) order.emplace_back(RVar(par));
    s.reorder(order);
    s.split(RVar(vec), RVar(vec + "_vo"), RVar(vec + "_vi"), width, kTail).vectorize(RVar(vec + "_vi"));
    if (!par.empty()) s.parallel(RVar(par));
    if (debug()) std::fprintf(stderr, "schedule_cpu: scatter %s.update(%d): lanes %s, parallel %s\n", f.name().c_str(), k, vec.c_str(), par.c_str());
    return true;
}

// AVX-512 has 32 vector registers (AVX2 16): the register blocks below
// size their accumulators by it.
bool has_32_vector_registers(const Halide::Target &t) {
    return t.has_feature(Halide::Target::AVX512) || t.has_feature(Halide::Target::AVX512_Skylake);
}

// The input channels a conv-shaped Func reduces over: its longest
// constant RVar (the taps are shorter but for a 1- or 2-channel input).
int64_t reduction_channels(Func f) {
    int64_t most = 1;
    for (int k = 0; k < f.num_update_definitions(); k++)
        for (const auto &r : f.update(k).get_schedule().rvars())
            if (const auto e = constant_extent(r)) most = std::max(most, *e);
    return most;
}

// A wrapper (f.in(), the one buffer consumers read) is computed at root in
// blocks of `width` x-lanes x rows x channels; f itself is computed per
// block, so its buffer is one block: after unrolling LLVM keeps it in
// vector registers (rows x channels accumulators; 24 of AVX-512's 32) while
// the reduction runs over taps and input channels. Each input vector
// loaded then feeds `channels` FMAs and each broadcast weight `rows`
// (with f at root, LLVM does not promote the accumulators). x, y and
// channels round up, as a partial block scalarises. This relies on how
// segtile builds its pipelines (generators/): the extra pixels read tensors
// that are bounded (clamped) or adjoints defined everywhere, the extra
// channels read parameter copies clamped to their extents; the extra
// values are computed and never read.
constexpr int kChunkBlocks = 8, kChannelGroup = 4;
constexpr int64_t kChunkBudget = 512 * 1024;  // half of a 1 MiB L2: the rest for weights and outputs

// Where a conv's producers computed per band of its rows go: the block
// wrapper and its outer parallel loop.
struct ConvBand {
    Func block;
    std::string loop;
};

ConvBand schedule_conv(Func f, const Halide::Target &target, bool band_producers) {
    const int width = target.natural_vector_size(f.type());
    const bool wide = has_32_vector_registers(target);
    const int rows = wide ? 6 : 3, channels = 4;
    Var x = f.args()[0], y = f.args()[1], c = f.args()[2];
    Var xo("xo"), xi("xi"), yo("yo"), yi("yi"), co("co"), ci("ci");
    Func block = f.in();
    block.compute_root()
        .split(x, xo, xi, width, Halide::TailStrategy::RoundUp)
        .split(y, yo, yi, rows, Halide::TailStrategy::RoundUp)
        .split(c, co, ci, channels, Halide::TailStrategy::RoundUp);
    // Blocks in chunks of kChunkBlocks along x times kChannelGroup
    // channel blocks: the chunk's input rows (all input channels) stay in
    // L2 while every channel block of the group reads them. Groups inside
    // bands of rows (the parallel tasks are the groups of one band, then
    // the next): a band's input rows come from memory once and stay in L3
    // for every group. The batch stays out of the parallel loop: fused
    // with the guarded channel groups, Halide's bound on it grows with
    // their count. A chunk is at most kChunkBudget of input rows, so that
    // many input channels do not overflow the L2.
    const int chunk = std::clamp(kChunkBudget / std::max<int64_t>(1, int64_t(rows + 2) * width * reduction_channels(f) *
                                                                          f.type().bytes()),
                                 int64_t(1), int64_t(kChunkBlocks));
    Var xoo("xoo"), xoi("xoi"), coo("coo"), coi("coi");
    block.split(xo, xoo, xoi, (int)chunk, kTail).split(co, coo, coi, kChannelGroup, kTail);
    std::vector<VarOrRVar> order{xi, ci, yi, xoi, coi, xoo, coo, yo};
    std::vector<std::string> outer{coo.name(), yo.name()};
    for (int i = 3; i < f.dimensions(); i++) order.emplace_back(f.args()[i]);
    block.reorder(order).vectorize(xi);
    // With producers per band (band_producers below), bands are the outer
    // parallel loop, each computing its producers once for every group;
    // groups run in parallel inside it, as the tasks of a small image's
    // one or two bands (bands per group would recompute a producer once
    // per group).
    if (band_producers) {
        outer = {yo.name()};
        block.parallel(coo);
    }
    const std::string loop = parallelise(block, outer);
    // Every block has the same constant size: a stack array that LLVM
    // promotes to registers, loops that unroll without guards (a guarded
    // channel tail is slower, and for layers of fewer than 4 channels
    // Halide cannot prove a guarded block's extent constant).
    f.compute_at(block, xoi).bound_storage(x, width).bound_storage(y, rows).bound_storage(c, channels);
    f.vectorize(x).unroll(y).unroll(c);
    for (int k = 0; k < f.num_update_definitions(); k++) {
        std::vector<VarOrRVar> inner{x, c, y};
        for (const auto &r : reduction_by_extent(f.update(k))) inner.emplace_back(RVar(r));
        for (int i = 3; i < f.dimensions(); i++) inner.emplace_back(f.args()[i]);
        f.update(k).reorder(inner).vectorize(x).unroll(c).unroll(y);
    }
    if (debug())
        std::fprintf(stderr, "schedule_cpu: conv blocks %s: %d x %d x %d, chunks of %d\n", f.name().c_str(), width, rows,
                     channels, (int)chunk);
    return {block, loop};
}

// A conv's weight gradient: dw(kx, ky, ci, co) += sum over image x, y and
// batch of d_out(x, y, co) * in(x + kx, y + ky, ci), a parameter Func of four
// dimensions whose update's LHS is its pure Vars and whose reduction is over
// run-time extents.
bool weight_grad_shaped(Func f) {
    if (f.dimensions() != 4 || f.num_update_definitions() != 1 || f.name().rfind("p_", 0) != 0) return false;
    const auto lhs = f.update_args(0);
    for (int i = 0; i < 4; i++) {
        const auto *v = lhs[i].as<Halide::Internal::Variable>();
        if (!v || v->name != f.args()[i].name()) return false;
    }
    bool constant = true;
    return !reduction_rvar(f.update(0), lhs, constant).empty() && !constant;
}

// Image x splits into vector lanes, rfactored into partial sums intm(u, kx,
// ky, ci, co). intm is computed per row of kernel taps (all kx of one ky)
// and block of 2 input x 4 output channels: 24 vector accumulators in a
// stack buffer of constant size, which LLVM keeps in registers over the
// whole image while each output-gradient vector feeds 6 FMAs and each
// input row, loaded at the 3 shifts of its taps, 4 (per tap, the loads
// rather than the FMAs would set the pace; for all taps and rows at once,
// the accumulators would be loaded and stored around every FMA). Kernels
// wider than 3 taps (a 7x7 stem) and those of unknown shape stay per tap.
// Parallel over output-channel blocks (each task owns its slice of dw).
// Channels round up to whole blocks, as in schedule_conv: the extra
// channels read sources clamped to their channels (generators/kernels.cpp)
// and adjoints defined everywhere; the blocks unroll without guards
// (unrolled guarded tails make Halide's lowering several times slower).
constexpr int kNarrowVectors = 2, kMaxFusedTaps = 3;
constexpr int64_t kBandBytes = int64_t(8) << 20;  // a quarter of the 32 MiB L3 that both cores share

void schedule_weight_grad(Func f, const Halide::Target &target, const std::vector<int> &extents) {
    const int width = target.natural_vector_size(f.type());
    const bool wide = has_32_vector_registers(target);
    // An image's 1 or 3 channels make one block of exactly that many, with
    // the kernel's row of taps and as many output channels as the
    // accumulators allow (3 x 3 x 2 or 3 x 1 x 8 of AVX-512's 32
    // registers). Rounded up to a block of 4 channels per tap, each
    // output-gradient plane would stream once per tap and a quarter (three
    // quarters for 1 channel) of the loads and FMAs would be padding.
    const bool image_input = extents.size() == 4 && extents[2] % 2 == 1 && extents[2] <= 3;
    const bool fuse = extents.size() == 4 && extents[0] > 1 && extents[0] <= kMaxFusedTaps && (extents[2] % 2 == 0 || image_input);
    const int taps = fuse ? extents[0] : 1;
    const int in_block = image_input ? extents[2] : taps > 1 ? (wide ? 2 : 1) : (wide ? 4 : 2);
    int out_block = 4;
    if (image_input && taps > 1)
        for (out_block = 1; out_block * 2 * taps * in_block <= (wide ? 24 : 12);) out_block *= 2;
    f.compute_root();
    Stage s = f.update(0);
    bool constant = true;
    const std::string r = reduction_rvar(s, f.update_args(0), constant);
    std::vector<std::string> image;  // the reduction's RVars, innermost first
    Expr extent;                     // of image x (r)
    for (const auto &d : s.get_schedule().rvars()) {
        image.push_back(d.var);
        if (d.var == r) extent = d.extent;
    }
    Var u(f.name() + "_u"), band(f.name() + "_band");
    RVar ro(r + "_ro"), ri(r + "_ri");
    s.split(RVar(r), ro, ri, width, kTail);
    // Image rows in bands of at most kBandBytes of input and output-gradient
    // rows, the outermost loop: every channel block sweeps a band (in L3)
    // rather than the whole image (from memory once planes outgrow the
    // caches). The band's height is a run-time expression of the image's
    // width: a small image (a deep layer, a tile) is one band, as each band
    // adds a parallel loop and the partial sums' reduction.
    const bool banded = image.size() > 1 && image[0] == r && extent.defined() && extents.size() == 4;
    const std::string rows_rvar = banded ? image[1] : "";
    RVar yo(rows_rvar + "_bo"), yi(rows_rvar + "_bi");
    if (banded) {
        const int64_t row_bytes = (extents[2] + extents[3]) * f.type().bytes();
        s.split(RVar(rows_rvar), yo, yi, Halide::max(1, int(kBandBytes / row_bytes) / max(extent, 1)), kTail);
        image[1] = yi.name();
    }
    Func intm = banded ? s.rfactor({{ri, u}, {yo, band}}) : s.rfactor(ri, u);
    Var kx = f.args()[0], ky = f.args()[1], ci = f.args()[2], co = f.args()[3];
    Var cio("cio"), cii("cii"), coo("coo"), coi("coi");
    // The sum of a block's lanes: the channel block (unrolled) inside the
    // lane loop, so its in_block x out_block sums are independent chains
    // of adds, not a chain of dependent scalar adds per weight, which
    // would set the pace where the image is small. Where the image is
    // narrow (deep layers, small tiles) each weight sums few pixels and
    // its scalar adds would cost as much as its FMAs: the lanes are summed
    // as one vector (a shuffle tree, an atomic add per weight) instead.
    // Wide images keep the scalar sums, a share too small to measure.
    std::vector<VarOrRVar> order{cii, coi, ri, kx, ky, cio, coo};
    if (banded) order.emplace_back(yo);
    Stage merge = f.update(0);
    merge.split(ci, cio, cii, in_block, Halide::TailStrategy::RoundUp)
        .split(co, coo, coi, out_block, Halide::TailStrategy::RoundUp)
        .reorder(order).unroll(cii).unroll(coi).parallel(coo);
    const Expr narrow = extent.defined() ? schedule::specialization_condition(merge, extent <= kNarrowVectors * width)
                                         : Expr();
    if (narrow.defined())
        merge.specialize(narrow).reorder(ri, cii, coi).atomic().vectorize(ri);
    intm.compute_at(f, taps > 1 ? ky : kx).bound_storage(u, width).bound_storage(kx, taps).bound_storage(ky, 1)
        .bound_storage(ci, in_block).bound_storage(co, out_block);
    // rfactor stores u outermost
    if (banded) intm.bound_storage(band, 1).reorder_storage(u, kx, ky, ci, co, band);
    else intm.reorder_storage(u, kx, ky, ci, co);
    intm.vectorize(u);
    if (taps > 1) intm.bound(kx, 0, taps);  // a constant loop to unroll: the kernel's width
    // Row-major over the image (x vectors innermost, then rows): streams
    // that the hardware prefetches. Rows of at most kNarrowVectors vectors
    // (a deep layer's small image, a tile) run down the columns instead:
    // each row's loop is then too short to keep the accumulators in
    // registers (LLVM loads and stores them around every row, as the row
    // loop is split into a main part and a guarded tail).
    // A tap loop stays out of the block unless unrolled (per tap, a loop
    // of run-time extent 1 inside it slows the block).
    std::vector<VarOrRVar> block_vars{u};
    if (taps > 1) block_vars.push_back(kx);
    block_vars.insert(block_vars.end(), {ci, co});
    std::vector<VarOrRVar> rows = block_vars, columns = block_vars;
    rows.push_back(ro);
    for (const auto &v : image) {
        if (v == r) continue;
        rows.emplace_back(RVar(v));
        columns.emplace_back(RVar(v));
        if (columns.size() == block_vars.size() + 1) columns.emplace_back(ro);  // after image y
    }
    auto block = [&](Stage st) {
        st.vectorize(u).unroll(ci).unroll(co);
        if (taps > 1) st.unroll(kx);
    };
    const Expr narrow_rows =
        extent.defined() ? schedule::specialization_condition(intm.update(0), extent <= kNarrowVectors * width) : Expr();
    if (columns.size() > block_vars.size() + 1 && narrow_rows.defined())
        block(intm.update(0).specialize(narrow_rows).reorder(columns));
    block(intm.update(0).reorder(rows));
    if (debug())
        std::fprintf(stderr, "schedule_cpu: weight-gradient blocks %s: %d lanes x %d taps x %d x %d%s\n",
                     f.name().c_str(), width, taps, in_block, out_block, banded ? ", rows in bands" : "");
}

// Who calls whom: per Func, the number of call sites in every definition
// of every Func, and whether all of them are in pure Funcs (no updates).
struct Callers {
    int sites = 0;
    bool pure_callers_only = true;
    int pointwise_update_sites = 0;  // read in an update at its own LHS point
    int coarse_sites = 0;            // read at an index divided by a constant (x / 2: upsampling)
    std::set<std::string> by;        // the callers
};

// Calls in update k of fn at the update's own LHS point, where every RVar
// is in the LHS (no reduction: each read is one write), e.g. the unclamped
// adjoint d_f(r.x, r.y, c, n) += select(inside, d_g(r.x, r.y, c, n), 0).
std::vector<std::string> pointwise_reads(const Halide::Internal::Function &fn, int k) {
    using namespace Halide::Internal;
    const Definition &d = fn.update(k);
    for (const auto &rv : d.schedule().rvars()) {
        bool in_lhs = false;
        for (const auto &a : d.args()) in_lhs = in_lhs || expr_uses_var(a, rv.var);
        if (!in_lhs) return {};
    }
    struct Find : IRVisitor {
        const std::vector<Expr> *lhs;
        std::vector<std::string> found;
        using IRVisitor::visit;
        void visit(const Call *c) override {
            bool same = c->call_type == Call::Halide && c->args.size() == lhs->size();
            for (size_t i = 0; same && i < c->args.size(); i++) same = equal(c->args[i], (*lhs)[i]);
            if (same) found.push_back(c->name);
            IRVisitor::visit(c);
        }
    } find;
    find.lhs = &d.args();
    for (const auto &v : d.values()) v.accept(&find);
    return find.found;
}

std::map<std::string, Callers> call_sites(const std::map<std::string, Halide::Internal::Function> &env) {
    // Call sites per callee, and those at an index divided by a constant,
    // directly or through the lets that hold a definition's common
    // subexpressions (tracked, not substituted: substituting every let can
    // blow an autodiff expression up; Darknet19's step compiled 30% slower).
    struct Count : Halide::Internal::IRVisitor {
        std::map<std::string, int> sites, coarse;
        std::set<std::string> divided;  // lets whose value divides
        bool divides(const Expr &e) {
            struct Find : IRVisitor {
                const std::set<std::string> *divided;
                bool found = false;
                using IRVisitor::visit;
                void visit(const Halide::Internal::Div *) override { found = true; }
                void visit(const Halide::Internal::Variable *v) override { found = found || divided->count(v->name); }
            } find;
            find.divided = &divided;
            e.accept(&find);
            return find.found;
        }
        using IRVisitor::visit;
        void visit(const Halide::Internal::Let *l) override {
            if (divides(l->value)) divided.insert(l->name);
            IRVisitor::visit(l);
        }
        void visit(const Halide::Internal::Call *c) override {
            if (c->call_type == Halide::Internal::Call::Halide) {
                sites[c->name]++;
                coarse[c->name] += std::any_of(c->args.begin(), c->args.end(), [&](const Expr &a) { return divides(a); });
            }
            IRVisitor::visit(c);
        }
    };
    std::map<std::string, Callers> out;
    for (const auto &[name, fn] : env) {
        Count count;
        fn.accept(&count);
        for (const auto &[callee, n] : count.coarse) out[callee].coarse_sites += n;
        const bool pure = !fn.has_update_definition();
        for (const auto &[callee, n] : count.sites) {
            out[callee].sites += n;
            out[callee].pure_callers_only = out[callee].pure_callers_only && pure;
            out[callee].by.insert(name);
        }
        for (int k = 0; k < (int)fn.updates().size(); k++)
            for (const auto &callee : pointwise_reads(fn, k)) out[callee].pointwise_update_sites++;
    }
    return out;
}

// A pure Func read at one call site, by a pure Func or by an update at its
// own LHS point, is computed inline there: a bounded copy, a relu,
// autodiff's pointwise adjoints, the input wrappers, the seeded output
// gradient that an unclamped adjoint adds up. Each value is then computed
// once, as before, without a pass over memory and a buffer of its own.
// Funcs read by reductions stay at root (inlined into a conv's taps they
// would be recomputed per tap).
bool read_once_pointwise(const Callers &c) {
    return c.sites == 1 && (c.pure_callers_only || c.pointwise_update_sites == 1);
}

// Halide calls in a pure Func's definition.
int calls_in(const Halide::Internal::Function &fn) {
    struct Count : Halide::Internal::IRVisitor {
        int n = 0;
        using IRVisitor::visit;
        void visit(const Halide::Internal::Call *c) override {
            n += c->call_type == Halide::Internal::Call::Halide || c->call_type == Halide::Internal::Call::Image;
            IRVisitor::visit(c);
        }
    } count;
    for (const auto &v : fn.values()) v.accept(&count);
    return count.n;
}

bool inline_pointwise(Func f, bool output, const Callers &c) {
    if (output || f.has_update_definition() || !read_once_pointwise(c)) return false;
    // Read at x / s, each value is needed s^2 times: a Func that gathers
    // several points (a max pool's argmax over its 4 taps, read by the
    // pool's adjoint in pure form, unclamp_adjoints.h) is computed once at
    // root instead of s^2 times inlined.
    if (c.coarse_sites > 0 && calls_in(f.function()) > 1) return false;
    f.compute_inline();
    return true;
}

// What f reads if f is a view: f(x, y, ...) = g(s0*x + o0, s1*y + o1, ...),
// each argument of g f's own Var at the same position times a constant
// plus a constant (a copy, or a strided conv's phase of its input,
// generators/layers/convolution.h). Null otherwise.
const Halide::Internal::Call *view_of(const Halide::Internal::Function &f) {
    using namespace Halide::Internal;
    if (f.has_update_definition() || f.outputs() != 1 || f.has_extern_definition()) return nullptr;
    const auto *call = f.values()[0].as<Call>();
    if (!call || (call->call_type != Call::Halide && call->call_type != Call::Image) ||
        call->args.size() != f.args().size())
        return nullptr;
    for (size_t i = 0; i < call->args.size(); i++) {
        const Expr &a = call->args[i];
        const std::string &v = f.args()[i];
        // a = o + s*v with o and s constants, s nonzero.
        const Expr o = simplify(substitute(v, 0, a)), s = simplify(substitute(v, 1, a) - o);
        if (!is_const(o) || !is_const(s) || is_const_zero(s)) return nullptr;
        if (!can_prove(a == o + s * Variable::make(Halide::Int(32), v))) return nullptr;
    }
    return call;
}

// A view of a Func that is computed in memory (a buffer, a Func with
// updates, or one that is neither a view nor inlined): reading that Func
// in the view's place costs an index computation, so the view is inlined
// at any number of call sites. Autodiff writes a copy of the adjoint per
// update of a Func with several (a strided conv's phases), each reading
// the next; at root each was a pass over memory, and so was each phase
// of a strided conv's input.
bool inline_view(Func f, bool output, const std::map<std::string, Halide::Internal::Function> &env,
                 const std::map<std::string, Callers> &callers) {
    using Halide::Internal::Call;
    if (output) return false;
    const Call *call = view_of(f.function());
    for (int hops = 0; call && hops < 64; hops++) {
        if (call->call_type == Call::Image) break;
        const auto g = env.find(call->name);
        if (g == env.end()) return false;
        if (g->second.has_update_definition() || g->second.has_extern_definition()) break;
        const Call *next = view_of(g->second);
        if (!next) {
            const auto c = callers.find(call->name);
            if (c != callers.end() && read_once_pointwise(c->second)) return false;  // inlined
            break;
        }
        call = next;
    }
    if (!call) return false;
    f.compute_inline();
    return true;
}

// Producers computed per band of their conv's rows (compute_at fusion
// inside a tile): a pure tensor Func read by one conv-shaped Func only (a
// bounded copy of a segment's input, a leaky ReLU of a batch norm, an
// output gradient's pointwise adjoint), which at root is written to memory
// whole and read back by the conv. Per band it stays in L2/L3 between the
// two, and its buffer is one band per worker. Backward kernels gain
// little: their recomputed activations are read by a conv and by a weight
// gradient, so they stay at root. A producer read by a weight gradient
// alone stays at root too: per band of the gradient's image rows it runs
// as parallel tasks inside a serial loop, no faster and sometimes slower
// than one streaming pass at root. Returns producer -> conv.
std::map<std::string, std::string> band_producers(const std::map<std::string, Halide::Internal::Function> &env,
                                                  const std::map<std::string, Callers> &callers,
                                                  const std::set<std::string> &outputs) {
    std::map<std::string, std::string> out;
    for (const auto &[name, c] : callers) {
        if (c.by.size() != 1 || name.rfind("p_", 0) == 0) continue;
        const auto g = env.find(name), conv = env.find(*c.by.begin());
        if (g == env.end() || conv == env.end() || outputs.count(name) || outputs.count(conv->first)) continue;
        const auto &p = g->second;
        // Views are inlined (inline_view), whoever reads them.
        if (p.has_update_definition() || p.has_extern_definition() || p.args().size() < 3 || view_of(p) ||
            conv->second.has_extern_definition() || !conv_shaped(Func(conv->second)))
            continue;
        out[name] = conv->first;
    }
    return out;
}

// A parameter's shape, where the pipeline states it: segtile's parameter
// copies clamp every index to the parameter's extents (generators/
// kernels.cpp, wrap_param: p(v) = w(clamp(v_i, 0, k_i - 1))). Empty otherwise.
std::vector<int> clamped_extents(const Halide::Internal::Function &f) {
    using namespace Halide::Internal;
    if (f.has_update_definition() || f.outputs() != 1) return {};
    const auto *call = f.values()[0].as<Call>();
    if (!call || call->args.size() != f.args().size()) return {};
    std::vector<int> out;
    for (size_t i = 0; i < call->args.size(); i++) {
        const auto *mx = call->args[i].as<Max>();
        const auto *mn = mx ? mx->a.as<Min>() : nullptr;
        const auto *v = mn ? mn->a.as<Variable>() : nullptr;
        const std::optional<int64_t> hi = mn ? as_const_int(mn->b) : std::nullopt;
        if (!v || v->name != f.args()[i] || !is_const_zero(mx->b) || !hi) return {};
        out.push_back((int)*hi + 1);
    }
    return out;
}

// Extents of a Func bounded to [0, e) in every dimension (Func::bound), or
// empty.
std::vector<int> bounded_extents(const Halide::Internal::Function &f) {
    std::vector<int> out(f.args().size(), 0);
    for (const auto &b : f.schedule().bounds()) {
        const auto at = std::find(f.args().begin(), f.args().end(), b.var);
        const auto e = b.extent.defined() ? Halide::Internal::as_const_int(b.extent) : std::nullopt;
        if (at == f.args().end() || !b.min.defined() || !Halide::Internal::is_const_zero(b.min) || !e) return {};
        out[at - f.args().begin()] = (int)*e;
    }
    for (int e : out)
        if (e <= 0) return {};
    return out;
}

// The parameter-shaped Funcs: each parameter's copy p_X, its adjoint and
// the gradient output grad_X, with their constant extents where the copy
// or the gradient output states them (segtile clamps the copy and bounds
// the gradient). A kernel that computes a gradient but never reads the
// parameter (the first layer's weights: no input gradient) has no copy:
// its adjoint and gradient are listed all the same, with no extents if
// nothing states them, so that they are not scheduled as tensors (a task
// per 3-wide row). Adjoints are found by structure (parameter_adjoints.h).
std::map<std::string, std::vector<int>> parameter_shapes(const std::map<std::string, Halide::Internal::Function> &env) {
    std::map<std::string, std::vector<int>> out;
    for (const auto &[grad, adjoint] : schedule::parameter_adjoints(env))
        out[grad] = out[adjoint] = bounded_extents(env.at(grad));
    for (const auto &[name, fn] : env) {
        if (name.rfind("p_", 0) != 0 || out.count(name)) continue;
        const std::vector<int> e = clamped_extents(fn);
        if (!e.empty()) out[name] = e;
    }
    return out;
}

// A parameter-shaped Func's pure definition (a copy, a zero init): lanes
// along its first dimension, as wide as its rows where known (a 3x3
// kernel's rows are 3 wide: lanes of the vector width would run them in
// scalar tails, a loop per row), in parallel over its last dimension
// (output channels; a bias stays serial), tasks of whole kernels.
void schedule_parameter(Func f, int width, const std::vector<int> &extents) {
    const int lanes = !extents.empty() && extents[0] < width ? extents[0] : width;
    vectorise(f, f.args()[0].name(), lanes);
    if (f.dimensions() > 1) parallelise(f, {f.args().back().name()});
}

constexpr int kRowsPerTask = 16, kChannelsPerTask = 16;

// Parallel tasks of blocks of kRowsPerTask rows times kChannelsPerTask
// channels over a tensor's pure Vars `par` (innermost first: y, c, n), the
// outer parts fused into one parallel loop. A task per row, or per block
// of rows of one channel, cost more in the thread pool than its work where
// planes are small and channels many: a task of 8 rows of 8 pixels for
// each of the 512 channels of Darknet19's pool5 at 256^2 (docs/design.md).
std::string parallel_blocks(Stage s, const Func &f, std::vector<std::string> par) {
    if (f.dimensions() < 2 || par.empty() || par[0] != f.args()[1].name()) return parallelise(s, par);
    const std::string y = par[0];
    Var yo(y + "_to"), yi(y + "_ti");
    s.split(Var(y), yo, yi, kRowsPerTask, kTail);
    par[0] = yo.name();
    if (par.size() > 1 && f.dimensions() > 2 && par[1] == f.args()[2].name()) {
        const std::string c = par[1];
        Var co(c + "_go"), ci(c + "_gi");
        s.split(Var(c), co, ci, kChannelsPerTask, kTail).reorder(yi, ci, yo, co);
        par[1] = co.name();
    }
    return parallelise(s, par);
}

// `output`: f is a pipeline output, which a wrapper would not replace.
// `param`: f's entry in parameter_shapes, null for a tensor.
void schedule_func(Func f, bool output, const Halide::Target &target, const std::vector<int> *param,
                   bool band_producers, std::map<std::string, ConvBand> &bands) {
    const int width = target.natural_vector_size(f.type());
    if (!output && conv_shaped(f)) {
        bands[f.name()] = schedule_conv(f, target, band_producers);
        return;
    }
    if (weight_grad_shaped(f)) {
        const std::vector<int> extents = param ? *param : std::vector<int>{};
        schedule_weight_grad(f, target, extents);
        schedule_parameter(f, width, extents);  // its zero init
        return;
    }
    f.compute_root();
    if (f.dimensions() > 0 && param) schedule_parameter(f, width, *param);
    else if (f.dimensions() > 0) {
        // Parallel tasks big enough to outweigh the thread pool's cost per
        // task: blocks of rows and channels (all of y, c, n fused would
        // make a task per row, of 2 to 8 vectors).
        vectorise(f, f.args()[0].name(), width);
        std::vector<std::string> outer;
        for (int i = 1; i < f.dimensions(); i++) outer.push_back(f.args()[i].name());
        parallel_blocks(f, f, outer);
    }
    for (int k = 0; k < f.num_update_definitions(); k++) {
        const auto lhs = f.update_args(k);
        const auto safe = safe_pure_positions(lhs);
        bool constant = true;
        const std::string r = reduction_rvar(f.update(k), lhs, constant);
        if (debug()) {
            std::ostringstream o;
            for (const auto &e : lhs) o << " [" << e << "]";
            o << " dims";
            for (const auto &d : f.update(k).get_schedule().dims()) o << " " << d.var;
            std::fprintf(stderr, "schedule_cpu: %s.update(%d) lhs%s\n", f.name().c_str(), k, o.str().c_str());
        }
        // rfactor where lanes along dimension 0 are useless: parameter
        // gradients (dimension 0 is a kernel tap) and LHS without a pure
        // Var there. A tensor's adjoint (autodiff's gather for a conv
        // input, over taps and channels) vectorises along image x instead.
        const bool param_grad = f.name().rfind("p_", 0) == 0;
        // A constant reduction shorter than a vector (a strided conv's phase
        // taps, scattered into the weight's adjoint) gains nothing from
        // lanes, and its partials would be allocated per parallel task.
        bool short_reduction = false;
        for (const auto &rv : f.update(k).get_schedule().rvars())
            if (rv.var == r) short_reduction = Halide::Internal::can_prove(rv.extent < width);
        const bool try_rfactor =
            !r.empty() && !short_reduction && ((!constant && param_grad) || safe.empty() || safe[0].empty());
        Func intm = try_rfactor ? rfactor_reduction(f, k, r, width) : Func();
        // What is left (or was there): lanes over dimension 0 when the LHS
        // holds it as a pure Var, parallel over the other pure Vars.
        const auto rest = nonempty(safe, 1);
        const std::string r0 = pure_rvar_at_0(f.update(k), lhs);
        if (!safe.empty() && !safe[0].empty()) vectorise(f.update(k), safe[0], width);
        else if (!r0.empty())
            f.update(k).split(RVar(r0), RVar(r0 + "_vo"), RVar(r0 + "_vi"), width, kTail).vectorize(RVar(r0 + "_vi"));
        // Without partials, in blocks of rows and channels as the pure
        // definition; the partials are computed per task of the fused loop.
        const std::string fused = intm.defined() ? parallelise(f.update(k), rest) : parallel_blocks(f.update(k), f, rest);
        // The rfactor partials per iteration of that parallel loop (one row
        // of a weight gradient), not `width` copies of the whole gradient.
        if (intm.defined() && !fused.empty()) intm.compute_at(f, Var(fused));
        if (!try_rfactor && r0.empty() && (safe.empty() || safe[0].empty()) && rest.empty() &&
            !schedule_scatter(f, k, lhs, width))
            f.update(k).unscheduled();
    }
}

}  // namespace

void schedule_cpu(const std::vector<Func> &outputs, const Halide::Target &target) {
    std::vector<Halide::Internal::Function> fs;
    for (const auto &f : outputs)
        if (f.defined()) fs.push_back(f.function());
    const auto env = Halide::Internal::build_environment(fs);
    const auto callers = call_sites(env);
    const auto shapes = parameter_shapes(env);
    std::set<std::string> output_names;  // a wrapper would not replace them
    for (const auto &f : fs) output_names.insert(f.name());
    const auto fused = band_producers(env, callers, output_names);
    std::set<std::string> banded;                  // convs with producers per band
    for (const auto &[producer, conv] : fused) banded.insert(conv);
    std::map<std::string, ConvBand> bands;        // conv -> its block
    std::vector<std::pair<Func, std::string>> at;  // producer, conv
    for (auto &[name, fn] : env) {
        if (fn.has_extern_definition()) {
            Func(fn).compute_root();
            continue;
        }
        const bool output = output_names.count(name) > 0;
        const auto c = callers.find(name);
        if (c != callers.end() && inline_pointwise(Func(fn), output, c->second)) continue;
        if (inline_view(Func(fn), output, env, callers)) continue;
        if (const auto b = fused.find(name); b != fused.end()) {
            Func p(fn);
            vectorise(p, p.args()[0].name(), target.natural_vector_size(p.type()));
            at.emplace_back(p, b->second);
            continue;
        }
        const auto e = shapes.find(name);
        schedule_func(Func(fn), output, target, e == shapes.end() ? nullptr : &e->second, banded.count(name) > 0, bands);
    }
    for (auto &[p, conv] : at) {
        const auto b = bands.find(conv);
        if (b == bands.end() || b->second.loop.empty()) {
            p.compute_root();
            continue;
        }
        p.compute_at(b->second.block, Var(b->second.loop));
        if (debug()) std::fprintf(stderr, "schedule_cpu: %s per band of %s\n", p.name().c_str(), conv.c_str());
    }
}

}  // namespace segtile
