#include "apps/run_folder.h"

#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "io/atomic_file.h"
#include "io/plot_png.h"
#include "io/weight_file.h"
#include "spec/errors.h"

namespace segtile {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

void write_run_folder(const std::string &dir, const TrainOptions &o, const Model &m, const ParamStore &params,
                      const Optimizer &opt, const std::vector<EpochLog> &epochs, const ExecutorCache &cache) {
    fs::create_directories(dir);
    // All files of the epoch are replaced together (io/atomic_file.h): a kill
    // at any moment leaves the previous epoch's set or this one.
    StagedFiles staged(dir);
    const std::string done = std::to_string(epochs.empty() ? 0 : epochs.back().epoch);
    // The two state files carry the epoch: a run killed between their renames is detected on resume.
    const std::map<std::string, std::string> meta = {{"epoch", done}, {"model", m.name}};
    save_parameters(staged.path("weights.safetensors"), params, meta);
    save_optimizer_state(staged.path("optimizer.safetensors"), opt, params, meta);
    std::vector<EpochRecord> rec;
    for (const auto &e : epochs) rec.push_back({e.epoch, e.loss, e.accuracy, e.peak_working});
    write_training_plot(staged.path("plot.png"), rec);
    if (!cache.plans().empty()) {
        std::string text;
        if (cache.plans().size() == 1) {
            text = plan_to_json(cache.plans().begin()->second);
        } else {  // one plan per image size
            json all = json::array();
            for (const auto &[size, p] : cache.plans()) all.push_back(json::parse(plan_to_json(p)));
            text = all.dump(2) + "\n";
        }
        write_file_atomically(staged.path("plan.json"), text);
    }
    json log = {{"config", config_to_json(o)}, {"execution", cache.describe()}, {"epochs_done", epochs.back().epoch}};
    log["epochs"] = json::array();
    for (const auto &e : epochs) log["epochs"].push_back(epoch_to_json(e));
    write_file_atomically(staged.path("log.json"), log.dump(2) + "\n");
    staged.commit();
}

}  // namespace

std::string default_run_dir(const std::string &model) {
    const std::time_t t = std::time(nullptr);
    char buf[64];
    std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", std::localtime(&t));
    return "runs/" + fs::path(model).stem().string() + "-" + buf;
}

void save_epoch(const std::string &dir, const TrainOptions &o, const Model &m, const ParamStore &params,
                const Optimizer &opt, const std::vector<EpochLog> &epochs, const ExecutorCache &cache) {
    try {
        write_run_folder(dir, o, m, params, opt, epochs, cache);
    } catch (const std::runtime_error &err) {
        const int epoch = epochs.back().epoch;
        const std::string kept = epochs.size() > 1 ? dir + " keeps epoch " + std::to_string(epoch - 1) +
                                                         " (free space, then --resume " + dir + ")"
                                                   : "nothing was saved";
        throw std::runtime_error("cannot save epoch " + std::to_string(epoch) + " to " + dir + ": " + err.what() +
                                 "; " + kept);
    }
}

void recover_save(const std::string &dir, std::ostream &log) {
    const Recovery r = recover_staged_files(dir);
    if (r == Recovery::RolledBack) log << dir << ": an unfinished save was undone; resuming from the epoch before it\n";
    if (r == Recovery::RolledForward) log << dir << ": an interrupted save was completed\n";
}

SavedRun read_run_folder(const std::string &dir) {
    std::ifstream f(dir + "/log.json");
    if (!f)
        throw DataError(dir + "/log.json: cannot read it; --resume takes a run folder written by "
                                          "`segtile train --run DIR` after at least one epoch");
    json j;
    try {
        f >> j;
    } catch (const json::exception &e) {
        throw DataError(dir + "/log.json: not valid JSON (" + e.what() + "); start a new run");
    }
    SavedRun saved;
    try {
        saved.options = config_from_json(j.at("config"));
        saved.state.epochs_done = j.at("epochs_done");
        for (const auto &e : j.at("epochs")) saved.state.epochs.push_back(epoch_from_json(e));
    } catch (const json::exception &e) {
        throw DataError(dir + "/log.json: missing or wrong field (" + e.what() + "); start a new run");
    }
    return saved;
}

}  // namespace segtile
