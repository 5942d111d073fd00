#include "io/weight_file.h"

#include <set>
#include <utility>
#include <vector>

namespace segtile {

namespace {

const std::string kNumBatchesSuffix = ".num_batches_tracked";

// The "<prefix>.num_batches_tracked" names PyTorch has for each batch norm.
std::vector<std::string> num_batches_names(const ParamStore &params) {
    std::vector<std::string> out;
    for (const auto &s : params.specs())
        if (s.role == ParamRole::RunningMean) {
            const std::string suffix = ".running_mean";
            out.push_back(s.name.substr(0, s.name.size() - suffix.size()) + kNumBatchesSuffix);
        }
    return out;
}

[[noreturn]] void mismatch(const std::string &path, const std::string &what, const std::string &advice) {
    throw WeightFileError("weight file '" + path + "' does not match the model: " + what + "; " + advice);
}

// The entries `expected` (name -> shape) must be exactly the file's tensors
// apart from `ignorable` names; each must be F32 or F64. Throws on the first
// difference, reporting in the model's order.
void check_entries(const SafetensorsReader &r, const std::vector<std::pair<std::string, std::vector<int64_t>>> &expected,
                   const std::set<std::string> &ignorable, const std::string &advice) {
    std::set<std::string> known = ignorable;
    for (const auto &[name, shape] : expected) {
        known.insert(name);
        const SafetensorsEntry *e = r.find(name);
        if (!e)
            mismatch(r.path(), "tensor '" + name + "' (shape " + torch_shape_string(shape) + ") is missing", advice);
        if (e->dtype != "F32" && e->dtype != "F64")
            throw WeightFileError("weight file '" + r.path() + "': tensor '" + name + "' has dtype " + e->dtype +
                                  "; segtile reads F32 and F64: convert it in PyTorch (tensor.float()) and save again");
        if (e->shape != shape)
            mismatch(r.path(),
                     "tensor '" + name + "' has shape " + torch_shape_string(e->shape) + ", the model's is " +
                         torch_shape_string(shape),
                     advice);
    }
    for (const auto &e : r.entries())
        if (!known.count(e.name))
            mismatch(r.path(), "the file has tensor '" + e.name + "', which the model does not have", advice);
}

const char *kWeightsAdvice = "load weights saved from this model (or from its PyTorch twin)";

std::string state_prefix(const std::string &kind, int which) {
    if (kind == "sgd") return "optimizer.sgd.momentum_buffer.";
    return which == 1 ? "optimizer.adam.exp_avg." : "optimizer.adam.exp_avg_sq.";
}

// One optimizer state tensor: its file name, which state (1: momentum or
// exp_avg, 2: exp_avg_sq) and the parameter index.
struct StateSlot {
    std::string name;
    int which;
    size_t param;
};

std::vector<StateSlot> state_slots(const Optimizer &opt, const ParamStore &params) {
    std::vector<StateSlot> out;
    const std::string &kind = opt.config().kind;
    for (int which = 1; which <= (kind == "adam" ? 2 : 1); which++) {
        const auto &state = which == 1 ? opt.state1() : opt.state2();
        for (size_t i = 0; i < params.specs().size() && i < state.size(); i++)
            if (state[i].defined()) out.push_back({state_prefix(kind, which) + params.specs()[i].name, which, i});
    }
    return out;
}

}  // namespace

void save_parameters(const std::string &path, const ParamStore &params,
                     const std::map<std::string, std::string> &metadata) {
    SafetensorsWriter w;
    for (size_t i = 0; i < params.specs().size(); i++) w.add(params.specs()[i].name, params.values[i]);
    // segtile's batch norm is frozen: it never counts batches.
    const int64_t zero = 0;
    for (const auto &name : num_batches_names(params)) w.add(name, "I64", {}, &zero);
    for (const auto &[k, v] : metadata) w.set_metadata(k, v);
    w.set_metadata("format", "pt");
    w.write(path);
}

std::map<std::string, std::string> load_parameters(const std::string &path, ParamStore &params) {
    SafetensorsReader r(path);
    std::vector<std::pair<std::string, std::vector<int64_t>>> expected;
    for (const auto &s : params.specs()) expected.emplace_back(s.name, s.torch_shape());
    const auto nb = num_batches_names(params);
    check_entries(r, expected, {nb.begin(), nb.end()}, kWeightsAdvice);
    for (size_t i = 0; i < params.specs().size(); i++) r.read(*r.find(params.specs()[i].name), params.values[i]);
    return r.metadata();
}

void save_optimizer_state(const std::string &path, const Optimizer &opt, const ParamStore &params,
                          const std::map<std::string, std::string> &metadata) {
    SafetensorsWriter w;
    for (const auto &slot : state_slots(opt, params))
        w.add(slot.name, (slot.which == 1 ? opt.state1() : opt.state2())[slot.param]);
    for (const auto &[k, v] : metadata) w.set_metadata(k, v);
    const OptimizerConfig &c = opt.config();
    w.set_metadata("optimizer.kind", c.kind);
    w.set_metadata("optimizer.step", std::to_string(opt.steps()));
    w.set_metadata("optimizer.lr", std::to_string(c.lr));
    w.set_metadata("optimizer.momentum", std::to_string(c.momentum));
    w.set_metadata("optimizer.weight_decay", std::to_string(c.weight_decay));
    w.set_metadata("optimizer.betas", std::to_string(c.beta1) + "," + std::to_string(c.beta2));
    w.set_metadata("optimizer.eps", std::to_string(c.eps));
    w.write(path);
}

std::map<std::string, std::string> load_optimizer_state(const std::string &path, Optimizer &opt,
                                                        const ParamStore &params) {
    SafetensorsReader r(path);
    const auto &md = r.metadata();
    const auto kind = md.find("optimizer.kind"), step = md.find("optimizer.step");
    if (kind == md.end() || step == md.end())
        throw WeightFileError("optimizer state file '" + path +
                              "' has no optimizer.kind / optimizer.step metadata: it is not a segtile optimizer "
                              "state; pass the run folder's optimizer file");
    if (kind->second != opt.config().kind)
        throw WeightFileError("optimizer state file '" + path + "' is for " + kind->second + ", this run uses " +
                              opt.config().kind + ": pass --optimizer " + kind->second + " to resume it");
    int64_t steps = -1;
    try {
        size_t used = 0;
        steps = std::stoll(step->second, &used);
        if (used != step->second.size()) steps = -1;
    } catch (const std::exception &) {
    }
    if (steps < 0)
        throw WeightFileError("optimizer state file '" + path + "': optimizer.step '" + step->second +
                              "' is not a step count; the file is corrupt: resume from an earlier save");
    const auto slots = state_slots(opt, params);
    auto tensor = [&](const StateSlot &s) -> Tensor & { return (s.which == 1 ? opt.state1() : opt.state2())[s.param]; };
    std::vector<std::pair<std::string, std::vector<int64_t>>> expected;
    for (const auto &s : slots) {
        const auto &d = tensor(s).dims();
        expected.emplace_back(s.name, std::vector<int64_t>(d.rbegin(), d.rend()));
    }
    check_entries(r, expected, {}, "resume with the model and optimizer the run was started with");
    for (const auto &s : slots) r.read(*r.find(s.name), tensor(s));
    opt.set_steps(steps);
    return md;
}

}  // namespace segtile
