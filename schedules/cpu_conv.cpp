// Convolutions (and autodiff's gathers for their input gradients),
// register-blocked.
#include "schedules/cpu_parts.h"

#include <algorithm>
#include <cstdio>

namespace segtile::cpu {

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

}  // namespace segtile::cpu
