#include "spec/segments.h"
#include "spec/errors.h"

#include <algorithm>
#include <set>
#include <sstream>
#include <stdexcept>

namespace segtile {

int trunk_end(const Model &m) {
    for (int i = 0; i <= m.loss.input_id; i++)
        if (Model::is_global(m.layers[i].kind)) return i - 1;
    return m.loss.input_id;
}

std::vector<int> SegmentLayout::checkpoints() const {
    std::set<int> s;
    for (const auto &seg : segments) {
        s.insert(seg.inputs.begin(), seg.inputs.end());
        s.insert(seg.outputs.begin(), seg.outputs.end());
    }
    return {s.begin(), s.end()};
}

SegmentLayout make_segments(const Model &m, std::vector<int> cuts, bool image_gradient) {
    const int L = (int)m.layers.size();
    const int end = trunk_end(m);
    if (end < 0) throw ModelError(m.source + ": model '" + m.name + "' has no spatial layers to tile");
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    for (int c : cuts)
        if (c < 0 || c >= end)
            throw UsageError(m.source + ": cut after layer " + std::to_string(c) +
                             " is outside the tiled trunk; cut after layers 0.." + std::to_string(end - 1) + " ('" +
                             m.layers[0].name + "'..'" + m.layers[std::max(end - 1, 0)].name + "')");
    SegmentLayout out;
    out.cuts = cuts;
    out.image_gradient = image_gradient;
    out.head_first = end + 1;
    std::vector<int> seg_of(L, -1);  // segment producing each layer's output; head layers: S
    int first = 0;
    std::vector<int> bounds = cuts;
    bounds.push_back(end);
    for (int b : bounds) {
        SegmentSpec s;
        s.first = first;
        s.last = b;
        for (int i = first; i <= b; i++) seg_of[i] = (int)out.segments.size();
        out.segments.push_back(s);
        first = b + 1;
    }
    const int S = (int)out.segments.size();
    for (int i = end + 1; i < L; i++) seg_of[i] = S;
    // A tensor is a checkpoint when a later segment, the head or the loss reads it.
    auto reader_segment = [&](int layer) { return seg_of[layer]; };
    std::vector<std::set<int>> ins(out.segments.size()), outs(out.segments.size());
    std::set<int> head_ins;
    for (int i = 0; i < L; i++) {
        const int rs = reader_segment(i);
        for (int src : m.layers[i].input_ids) {
            const int t = src < 0 ? L : src;
            const int ps = src < 0 ? -1 : seg_of[src];
            if (ps == rs) continue;
            if (rs < S) ins[rs].insert(t);
            else head_ins.insert(t);
            if (ps >= 0 && ps < S) outs[ps].insert(t);
        }
    }
    if (m.loss.input_id <= end) {  // dense loss on the trunk's output
        head_ins.insert(m.loss.input_id);
        outs[seg_of[m.loss.input_id]].insert(m.loss.input_id);
    }
    for (size_t s = 0; s < out.segments.size(); s++) {
        auto &seg = out.segments[s];
        seg.inputs.assign(ins[s].begin(), ins[s].end());
        outs[s].erase(seg.last);
        seg.outputs.assign(outs[s].begin(), outs[s].end());
        seg.outputs.push_back(seg.last);  // the primary output, whose grid the tiles follow
    }
    out.head_inputs.assign(head_ins.begin(), head_ins.end());
    return out;
}

std::vector<bool> backward_needed(const Model &m, const SegmentLayout &layout) {
    const int L = (int)m.layers.size();
    std::vector<bool> trainable(L, false);
    for (const auto &p : m.params()) trainable[p.layer] = trainable[p.layer] || p.trainable;
    std::vector<bool> needed(layout.segments.size(), false);
    for (size_t s = 0; s < layout.segments.size(); s++) {  // producers come before their readers
        const SegmentSpec &seg = layout.segments[s];
        for (int l = seg.first; l <= seg.last; l++) needed[s] = needed[s] || trainable[l];
        for (int t : seg.inputs) {
            if (t == L) {
                needed[s] = needed[s] || layout.image_gradient;
                continue;
            }
            for (size_t p = 0; p < s; p++)
                if (std::count(layout.segments[p].outputs.begin(), layout.segments[p].outputs.end(), t))
                    needed[s] = needed[s] || needed[p];
        }
    }
    return needed;
}

std::vector<int> parse_cuts(const Model &m, const std::string &s) {
    std::vector<int> cuts;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ',')) {
        if (item.empty()) continue;
        int idx = m.find_layer(item);
        if (idx < 0) {
            try {
                size_t pos = 0;
                idx = std::stoi(item, &pos);
                if (pos != item.size()) idx = -1;
            } catch (const std::exception &) {
                idx = -1;
            }
        }
        if (idx < 0 || idx >= (int)m.layers.size())
            throw UsageError("cut '" + item + "' names no layer of model '" + m.name + "'; give layer names or indices");
        cuts.push_back(idx);
    }
    return cuts;
}

}  // namespace segtile
