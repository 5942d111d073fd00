#include "apps/run_config.h"
#include "spec/errors.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

namespace segtile {

using json = nlohmann::json;

namespace {

// Every saved field once, by its key in log.json: to_json and from_json
// both walk this list (O is TrainOptions, const or not).
template <class O, class F>
void config_fields(O &o, F &&f) {
    f("model", o.model);
    f("data", o.data);
    f("images", o.images);
    f("task", o.task);
    f("size", o.size);
    f("images_per_epoch", o.images_per_epoch);
    f("epochs", o.epochs);
    f("batch", o.batch);
    f("seed", o.seed);
    f("optimizer", o.optimizer.kind);
    f("lr", o.optimizer.lr);
    f("momentum", o.optimizer.momentum);
    f("weight_decay", o.optimizer.weight_decay);
    f("lr_schedule", o.lr_schedule);
    f("memory_cap", o.execution.memory_cap);
    f("plan_file", o.execution.plan_file);
    f("cuts", o.execution.cuts);
    f("tile", o.execution.tile);
    f("checkpoint_dir", o.execution.checkpoint_dir);
    f("estimate", o.execution.estimate);
}

template <class E, class F>
void epoch_fields(E &e, F &&f) {
    f("epoch", e.epoch);
    f("loss", e.loss);
    f("accuracy", e.accuracy);
    f("images_per_second", e.images_per_second);
    f("seconds", e.seconds);
    f("lr_end", e.lr);
    f("peak_working_memory_bytes", e.peak_working);
    f("checkpoint_store_bytes", e.peak_checkpoint);
    f("high_water_mark_bytes", e.high_water_mark);
}

}  // namespace

json config_to_json(const TrainOptions &o) {
    json j = json::object();
    config_fields(o, [&](const char *key, const auto &v) { j[key] = v; });
    j["target"] = o.execution.target;
    j["on_bad_image"] = o.on_bad_image;
    return j;
}

TrainOptions config_from_json(const json &j) {
    TrainOptions o;
    config_fields(o, [&](const char *key, auto &v) { j.at(key).get_to(v); });
    o.execution.target = j.value("target", "cpu");  // runs from before --target: CPU
    o.on_bad_image = j.value("on_bad_image", "skip");
    o.execution.optimizer = o.optimizer.kind;
    o.execution.batch = o.batch;
    return o;
}

json epoch_to_json(const EpochLog &e) {
    json j = json::object();
    epoch_fields(e, [&](const char *key, const auto &v) { j[key] = v; });
    if (e.peak_device > 0) j["peak_device_memory_bytes"] = e.peak_device;
    j["skipped_images"] = e.skipped_images;
    return j;
}

EpochLog epoch_from_json(const json &j) {
    EpochLog e;
    epoch_fields(e, [&](const char *key, auto &v) { j.at(key).get_to(v); });
    e.peak_device = j.value("peak_device_memory_bytes", (int64_t)0);
    e.skipped_images = j.value("skipped_images", (int64_t)0);
    return e;
}

void check_options(const TrainOptions &o) {
    auto refuse = [](const std::string &option, double v, const std::string &want) {
        std::ostringstream s;
        s << option << " " << v << " is not " << want;
        throw UsageError(s.str());
    };
    const OptimizerConfig &c = o.optimizer;
    if (!(std::isfinite(c.lr) && c.lr > 0)) refuse("--lr", c.lr, "a finite number above 0 (try 0.01)");
    if (!(std::isfinite(c.momentum) && c.momentum >= 0 && c.momentum < 1))
        refuse("--momentum", c.momentum, "a number in [0, 1) (try 0.9)");
    if (!(std::isfinite(c.weight_decay) && c.weight_decay >= 0))
        refuse("--weight-decay", c.weight_decay, "a finite number of at least 0");
    if (o.epochs < 1) refuse("--epochs", o.epochs, "at least 1");
    if (o.batch < 1) refuse("--batch", o.batch, "at least 1");
    if (o.images_per_epoch < 1) refuse("--images-per-epoch", o.images_per_epoch, "at least 1");
    if (o.stop_after < 0) refuse("--stop-after", o.stop_after, "at least 0");
    if (o.on_bad_image != "skip" && o.on_bad_image != "stop")
        throw UsageError("--on-bad-image: '" + o.on_bad_image + "' is not skip or stop");
}

}  // namespace segtile
