#include "autoscheduler/plan.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include <nlohmann/json.hpp>

#include "runtime/memory_ledger.h"

namespace segtile {

using nlohmann::json;

std::vector<TileSize> Plan::tile_sizes() const {
    std::vector<TileSize> t;
    for (const auto &s : segments) t.push_back(s.tile);
    return t;
}

std::string Plan::cuts_string() const {
    std::string s;
    for (const auto &n : cut_names) s += (s.empty() ? "" : ",") + n;
    return s;
}

std::string plan_to_json(const Plan &p) {
    json j;
    j["format"] = "segtile-plan/1";
    j["model"] = p.model;
    j["image"] = {{"width", p.width}, {"height", p.height}, {"batch", p.batch}};
    j["caps"] = {{"working_bytes", p.memory_cap}, {"checkpoint_bytes", p.checkpoint_cap}};
    j["target"] = p.device ? "cuda" : "cpu";
    j["image_gradient"] = p.image_gradient;
    j["mapped_checkpoints"] = p.mapped_checkpoints;
    j["cuts"] = p.cut_names;
    j["segments"] = json::array();
    for (const auto &s : p.segments)
        j["segments"].push_back({{"first", s.first},
                                 {"last", s.last},
                                 {"tile", {s.tile.width, s.tile.height}},
                                 {"tiles", s.tiles},
                                 {"window", {s.window_width, s.window_height}},
                                 {"recompute", s.recompute},
                                 {"forward_bytes", s.forward_bytes},
                                 {"backward_bytes", s.backward_bytes},
                                 {"kernel_bytes", s.kernel_bytes},
                                 {"resident_bytes", s.resident_bytes},
                                 {"exact", s.exact},
                                 {"seconds", s.seconds},
                                 {"flops", s.flops},
                                 {"elements", s.elements},
                                 {"moved_bytes", s.moved_bytes},
                                 {"weight_elements", s.weight_elements},
                                 {"calls", s.calls}});
    j["predicted"] = {{"fixed_bytes", p.fixed_bytes}, {"reserve_bytes", p.reserve_bytes}, {"head_bytes", p.head_bytes},
                      {"peak_working_bytes", p.peak_bytes}, {"checkpoint_bytes", p.checkpoint_bytes},
                      {"flops", p.flops}, {"recompute", p.recompute}, {"seconds", p.seconds}};
    return j.dump(2) + "\n";
}

Plan plan_from_json(const std::string &text, const Model &m, const std::string &source) {
    Plan p;
    try {
        const json j = json::parse(text);
        if (j.value("format", "") != "segtile-plan/1")
            throw PlanFileError(source + ": not a segtile plan (expected \"format\": \"segtile-plan/1\")");
        p.model = j.at("model").get<std::string>();
        if (p.model != m.name)
            throw PlanFileError(source + ": the plan is for model '" + p.model + "', not '" + m.name + "'");
        p.width = j.at("image").at("width");
        p.height = j.at("image").at("height");
        p.batch = j.at("image").value("batch", 1);
        p.memory_cap = j.at("caps").value("working_bytes", (int64_t)0);
        p.checkpoint_cap = j.at("caps").value("checkpoint_bytes", (int64_t)0);
        p.device = j.value("target", "cpu") == "cuda";
        p.image_gradient = j.value("image_gradient", true);  // plans before it had it
        p.mapped_checkpoints = j.value("mapped_checkpoints", false);
        for (const auto &n : j.at("cuts")) {
            const std::string name = n.get<std::string>();
            const int l = m.find_layer(name);
            if (l < 0) throw PlanFileError(source + ": cut '" + name + "' is not a layer of " + m.name);
            p.cuts.push_back(l);
            p.cut_names.push_back(name);
        }
        for (const auto &s : j.at("segments")) {
            SegmentPlan sp;
            sp.first = s.at("first");
            sp.last = s.at("last");
            sp.tile = {s.at("tile").at(0).get<int64_t>(), s.at("tile").at(1).get<int64_t>()};
            sp.tiles = s.value("tiles", (int64_t)0);
            sp.window_width = s.at("window").at(0);
            sp.window_height = s.at("window").at(1);
            sp.recompute = s.value("recompute", 1.0);
            sp.forward_bytes = s.value("forward_bytes", (int64_t)0);
            sp.backward_bytes = s.value("backward_bytes", (int64_t)0);
            sp.kernel_bytes = s.value("kernel_bytes", (int64_t)0);
            sp.resident_bytes = s.value("resident_bytes", (int64_t)0);
            sp.exact = s.value("exact", false);
            sp.seconds = s.value("seconds", 0.0);
            sp.flops = s.value("flops", 0.0);
            sp.elements = s.value("elements", 0.0);
            sp.moved_bytes = s.value("moved_bytes", 0.0);
            sp.weight_elements = s.value("weight_elements", 0.0);
            sp.calls = s.value("calls", (int64_t)0);
            p.segments.push_back(sp);
        }
        if (p.segments.size() != p.cuts.size() + 1)
            throw PlanFileError(source + ": " + std::to_string(p.cuts.size()) + " cuts need " +
                             std::to_string(p.cuts.size() + 1) + " segments, the plan has " +
                             std::to_string(p.segments.size()));
        const json &pr = j.at("predicted");
        p.fixed_bytes = pr.value("fixed_bytes", (int64_t)0);
        p.reserve_bytes = pr.value("reserve_bytes", (int64_t)0);
        p.head_bytes = pr.value("head_bytes", (int64_t)0);
        p.peak_bytes = pr.value("peak_working_bytes", (int64_t)0);
        p.checkpoint_bytes = pr.value("checkpoint_bytes", (int64_t)0);
        p.flops = pr.value("flops", 0.0);
        p.recompute = pr.value("recompute", 1.0);
        p.seconds = pr.value("seconds", 0.0);
    } catch (const json::exception &e) {
        // nlohmann's messages start with "[json.exception.type.N] ": the rest is the reason.
        std::string why = e.what();
        if (why.rfind("[json.", 0) == 0 && why.find("] ") != std::string::npos) why = why.substr(why.find("] ") + 2);
        throw PlanFileError(source + ": malformed plan: " + why + "; write it again with `segtile plan ... --json " +
                            source + "`");
    }
    return p;
}

std::string plan_table(const Plan &p, const Model &m) {
    std::ostringstream o;
    char line[512];
    o << "plan for " << p.model << " at " << p.width << "x" << p.height << ", batch " << p.batch << "; cap "
      << (p.memory_cap > 0 ? format_bytes(p.memory_cap) : std::string("none"))
      << (p.device ? " of device memory (CUDA)" : "") << "\n";
    // The layers column as wide as its longest entry (ResNet18's names are long).
    auto layers_of = [&](const SegmentPlan &s) { return m.layers[s.first].name + " .. " + m.layers[s.last].name; };
    int width = 28;
    for (const SegmentPlan &s : p.segments) width = std::max(width, (int)layers_of(s).size());
    // With mapped checkpoints, a column for the checkpoint pages a row of
    // tiles holds resident (counted in the cap with the larger call).
    const bool mapped = p.mapped_checkpoints;
    std::snprintf(line, sizeof line, "%-3s %-*s %11s %7s %11s %9s %11s %11s%s %8s\n", "seg", width, "layers", "tile",
                  "tiles", "window", "recompute", "forward", "backward", mapped ? "  mapped rows" : "", "seconds");
    o << line;
    auto side = [](int64_t t) { return t > 0 ? std::to_string(t) : std::string("all"); };
    for (size_t k = 0; k < p.segments.size(); k++) {
        const SegmentPlan &s = p.segments[k];
        const std::string layers = layers_of(s);
        const std::string tile = s.tile.width > 0 || s.tile.height > 0 ? side(s.tile.width) + "x" + side(s.tile.height)
                                                                       : std::string("whole");
        const std::string window = std::to_string(s.window_width) + "x" + std::to_string(s.window_height);
        char rows[32] = "";
        if (mapped) std::snprintf(rows, sizeof rows, " %12s", format_bytes(s.resident_bytes).c_str());
        std::snprintf(line, sizeof line, "%-3zu %-*s %11s %7lld %11s %9.2f %11s %11s%s %8.2f%s\n", k, width,
                      layers.c_str(), tile.c_str(), (long long)s.tiles, window.c_str(), s.recompute,
                      format_bytes(s.forward_bytes).c_str(),
                      s.backward_bytes > 0 ? format_bytes(s.backward_bytes).c_str() : "not run", rows, s.seconds,
                      s.exact ? "" : "  (kernel memory estimated)");
        o << line;
    }
    o << "cuts: " << (p.cut_names.empty() ? std::string("none") : p.cuts_string()) << "\n";
    const char *with = p.image_gradient ? ", with the image's gradient" : "";
    if (p.device)
        o << "predicted peak device memory " << format_bytes(p.peak_bytes) << " (head " << format_bytes(p.head_bytes)
          << "); parameters, optimizer state and the checkpoint store (" << format_bytes(p.checkpoint_bytes) << with
          << ") on the host\n";
    else
        o << "predicted peak working memory " << format_bytes(p.peak_bytes)
          << (mapped ? " with the resident pages of the mapped checkpoints" : "") << " (parameters, gradients, optimizer "
          << format_bytes(p.fixed_bytes) << "; runtime reserve " << format_bytes(p.reserve_bytes) << "; head "
          << format_bytes(p.head_bytes) << "); checkpoint store "
          << format_bytes(p.checkpoint_bytes) << with << "\n";
    std::snprintf(line, sizeof line, "predicted %.3g GFLOP per step (recompute x%.2f), %.2f s per step\n",
                  p.flops / 1e9, p.recompute, p.seconds);
    o << line;
    return o.str();
}

}  // namespace segtile
