// Conv weight gradients: rfactored into vector partial sums per channel
// block.
#include "schedules/cpu_parts.h"

#include <algorithm>
#include <cstdio>

namespace segtile::cpu {

// A conv's weight gradient: dw(kx, ky, ci, co) += sum over image x, y and
// batch of d_out(x, y, co) * in(x + kx, y + ky, ci), a parameter Func of four
// dimensions whose update's LHS is its pure Vars and whose reduction is over
// run-time extents.
bool weight_grad_shaped(Func f) {
    if (f.dimensions() != 4 || f.num_update_definitions() != 1 || !is_parameter_func(f.name())) return false;
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

}  // namespace segtile::cpu
