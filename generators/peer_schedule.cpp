#include "generators/peer_schedule.h"

#include <stdexcept>
#include <thread>

namespace segtile {

namespace {

using Halide::Parameter;

// Plugin paths come from the Halide package's imported targets (CMake), so
// the plugins always match the libHalide this program links.
std::string plugin_path(const std::string &name) {
    if (name == "Li2018") return SEGTILE_PLUGIN_LI2018;
    if (name == "Adams2019") return SEGTILE_PLUGIN_ADAMS2019;
    if (name == "Mullapudi2016") return SEGTILE_PLUGIN_MULLAPUDI2016;
    throw std::invalid_argument("unknown autoscheduler '" + name + "' (Li2018, Adams2019, Mullapudi2016)");
}

std::vector<int64_t> tensor_extents(const Model &m, int tensor, const PeerSchedule &peer) {
    if (tensor == (int)m.layers.size()) return {peer.width, peer.height, m.input_channels, peer.batch};
    const TensorShape s = m.shapes(peer.width, peer.height).at(tensor);
    return {s.width, s.height, s.channels, peer.batch};
}

// Extents of buffer argument `a` when every buffer is its whole tensor.
std::vector<int64_t> buffer_extents(const Model &m, const KernelArg &a, const PeerSchedule &peer) {
    std::vector<int64_t> e;
    if (a.param >= 0) e = m.params().at(a.param).dims;
    else if (a.tensor >= 0) e = tensor_extents(m, a.tensor, peer);
    else if (a.integer) e = {peer.batch};                                // labels
    else if (a.dims == 4) e = tensor_extents(m, m.loss.input_id, peer);  // dense_target
    if ((int)e.size() != a.dims) throw std::logic_error("peer estimates: no shape for argument '" + a.name + "'");
    return e;
}

bool ends_with(const std::string &s, const std::string &suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), std::string::npos, suffix) == 0;
}

// Value of int32 scalar argument `a` (image size, tile bounds of one whole-image tile).
int32_t scalar_value(const Model &m, const KernelArg &a, const PeerSchedule &peer) {
    if (a.name == "image_width") return (int32_t)peer.width;
    if (a.name == "image_height") return (int32_t)peer.height;
    if (ends_with(a.name, "_min")) return 0;
    const std::vector<int64_t> e = tensor_extents(m, a.tensor, peer);
    if (ends_with(a.name, "_x_max")) return (int32_t)(e[0] - 1);
    if (ends_with(a.name, "_y_max")) return (int32_t)(e[1] - 1);
    throw std::logic_error("peer estimates: unknown scalar '" + a.name + "'");
}

// The Params and ImageParams a pipeline reads, by name. The JIT path holds
// them only as Halide::Arguments (copies), so they are found in the IR.
class ParameterFinder : public Halide::Internal::IRGraphVisitor {
public:
    std::map<std::string, Parameter> found;

private:
    using IRGraphVisitor::visit;
    void visit(const Halide::Internal::Call *op) override {
        if (op->param.defined()) found.emplace(op->param.name(), op->param);
        IRGraphVisitor::visit(op);
    }
    void visit(const Halide::Internal::Variable *op) override {
        if (op->param.defined()) found.emplace(op->param.name(), op->param);
    }
};

}  // namespace

void apply_peer_schedule(const Model &m, const std::vector<KernelArg> &signature,
                         const std::vector<Halide::Func> &outputs, const PeerSchedule &peer,
                         const Halide::Target &target) {
    std::vector<Halide::Internal::Function> fs;
    for (const auto &f : outputs) fs.push_back(f.function());
    ParameterFinder finder;
    for (const auto &[name, fn] : Halide::Internal::build_environment(fs)) fn.accept(&finder);
    size_t next_output = 0;
    for (const KernelArg &a : signature) {
        if (a.output) {
            Halide::Region r;
            if (a.dims > 0)
                for (int64_t e : buffer_extents(m, a, peer)) r.emplace_back(0, (int)e);
            Halide::Func out = outputs.at(next_output++);
            out.set_estimates(r);
            continue;
        }
        auto it = finder.found.find(a.name);
        if (it == finder.found.end()) continue;  // an input this pipeline never reads
        Parameter &p = it->second;
        if (a.scalar) {
            p.set_estimate(Halide::Expr(scalar_value(m, a, peer)));
            continue;
        }
        const std::vector<int64_t> e = buffer_extents(m, a, peer);
        for (int d = 0; d < a.dims; d++) {
            p.set_min_constraint_estimate(d, 0);
            p.set_extent_constraint_estimate(d, (int)e[d]);
        }
    }
    // dlopen counts references: a plugin already loaded is not registered twice.
    Halide::load_plugin(plugin_path(peer.autoscheduler));
    Halide::AutoschedulerParams params(peer.autoscheduler);
    const int threads = peer.parallelism > 0 ? peer.parallelism : (int)std::thread::hardware_concurrency();
    params.extra["parallelism"] = std::to_string(threads);
    for (const auto &[k, v] : peer.extra) params.extra[k] = v;
    Halide::Pipeline(outputs).apply_autoscheduler(target, params);
}

}  // namespace segtile
