#include "apps/training_run.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "apps/progress_bar.h"
#include "io/atomic_file.h"
#include "io/chrome_trace.h"
#include "io/dataset.h"
#include "io/folder_lock.h"
#include "io/plot_png.h"
#include "io/weight_file.h"
#include "runtime/marks_task.h"

namespace segtile {

namespace fs = std::filesystem;
using json = nlohmann::json;

float scheduled_lr(const std::string &schedule, float lr, int64_t step, int64_t steps_per_epoch, int epochs) {
    if (schedule == "constant") return lr;
    const int64_t total = std::max<int64_t>(1, steps_per_epoch * epochs);
    if (schedule == "cosine") return (float)(lr * 0.5 * (1 + std::cos(M_PI * (double)step / (double)total)));
    if (schedule == "step") {
        const int64_t epoch = step / std::max<int64_t>(1, steps_per_epoch);
        // Compared without integer division, so that short runs start at lr.
        return lr * (4 * epoch >= 3 * (int64_t)epochs ? 0.01f : 2 * epoch >= (int64_t)epochs ? 0.1f : 1.0f);
    }
    throw std::invalid_argument("--lr-schedule: unknown schedule '" + schedule + "'; use constant, cosine or step");
}

namespace {

// ------------------------------------------------------------------ config

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

json to_json(const TrainOptions &o) {
    json j = json::object();
    config_fields(o, [&](const char *key, const auto &v) { j[key] = v; });
    j["target"] = o.execution.target;
    j["on_bad_image"] = o.on_bad_image;
    return j;
}

TrainOptions from_json(const json &j) {
    TrainOptions o;
    config_fields(o, [&](const char *key, auto &v) { j.at(key).get_to(v); });
    o.execution.target = j.value("target", "cpu");  // runs from before --target: CPU
    o.on_bad_image = j.value("on_bad_image", "skip");
    o.execution.optimizer = o.optimizer.kind;
    o.execution.batch = o.batch;
    return o;
}

// ------------------------------------------------------------------ data

// What one image brings: the image, and its label or (for a dense loss) target.
struct Example {
    Tensor image;   // (W, H, C, 1)
    int label = -1;  // classification
    Tensor mask;     // segmentation: (W, H, 1, 1) int32
};

class SampleSource {
public:
    virtual ~SampleSource() = default;
    virtual size_t size() const = 0;
    virtual std::vector<size_t> order(uint64_t seed, int64_t epoch) const = 0;
    virtual Example load(size_t i, int64_t epoch, MemoryLedger *ledger) = 0;
    virtual std::set<std::pair<int64_t, int64_t>> image_sizes() const = 0;
    virtual std::string describe() const = 0;
    virtual std::string name(size_t i) const = 0;  // image i, as an error names it
};

// The main job: image i of epoch e is image e * size + i of the seed's stream.
class GeneratedMarks : public SampleSource {
public:
    GeneratedMarks(LargeMarks task, int per_epoch, uint64_t seed) : task_(task), per_epoch_(per_epoch), seed_(seed) {}
    size_t size() const override { return (size_t)per_epoch_; }
    std::vector<size_t> order(uint64_t, int64_t) const override {
        std::vector<size_t> o(per_epoch_);
        for (size_t i = 0; i < o.size(); i++) o[i] = i;
        return o;
    }
    Example load(size_t i, int64_t epoch, MemoryLedger *ledger) override {
        Example e;
        e.image = Tensor({task_.width, task_.height, 1, 1}, ledger, MemoryLedger::Kind::Data);  // (W, H, 1, 1)
        e.label = task_.generate(e.image, seed_, (uint64_t)epoch * per_epoch_ + i);
        return e;
    }
    std::set<std::pair<int64_t, int64_t>> image_sizes() const override { return {{task_.width, task_.height}}; }
    std::string name(size_t i) const override { return "generated image " + std::to_string(i + 1); }
    std::string describe() const override {
        return std::to_string(per_epoch_) + " generated " + std::to_string(task_.width) + "x" +
               std::to_string(task_.height) + " images per epoch (noise with " + std::to_string(task_.min_marks) +
               "-" + std::to_string(task_.max_marks) + " " + std::to_string(task_.mark_size) + "x" +
               std::to_string(task_.mark_size) + " marks per 512x512 block: filled = class 1, hollow = class 0)";
    }

private:
    LargeMarks task_;
    int per_epoch_;
    uint64_t seed_;
};

class CsvData : public SampleSource {
public:
    CsvData(const std::string &csv, const DatasetOptions &o, const std::string &folder) : data_(csv, o, folder) {}
    size_t size() const override { return data_.size(); }
    std::vector<size_t> order(uint64_t seed, int64_t epoch) const override { return data_.epoch_order(seed, epoch); }
    Example load(size_t i, int64_t, MemoryLedger *ledger) override {
        Sample s = data_.load(i, ledger);
        Example e;
        e.image = std::move(s.image);
        e.label = s.label;
        e.mask = std::move(s.mask);
        return e;
    }
    std::set<std::pair<int64_t, int64_t>> image_sizes() const override {
        std::set<std::pair<int64_t, int64_t>> sizes;
        for (const auto &e : data_.entries()) {
            const ImageInfo info = probe_image(e.image, data_.options().image);
            sizes.insert({info.width, info.height});
        }
        return sizes;
    }
    std::string describe() const override {
        return std::to_string(data_.size()) + " images listed in " + data_.csv();
    }
    std::string name(size_t i) const override { return data_.entries()[i].image; }

private:
    Dataset data_;
};

std::unique_ptr<SampleSource> make_source(const TrainOptions &o, const Model &m) {
    if (o.data.empty()) {
        if (m.loss.kind != LossKind::SoftmaxCrossEntropy || m.output_channels() != 2 || m.input_channels != 1)
            throw ModelError("model '" + m.name + "' does not fit the built-in task (gray images, 2 classes, "
                             "softmax cross-entropy); pass a classifier like models/marks_cnn.json, or --data");
        LargeMarks task;
        const auto [w, h] = parse_size(o.size, "--size");
        task.width = w;
        task.height = h;
        if (w < task.mark_size || h < task.mark_size)
            throw std::invalid_argument("--size: the built-in task draws " + std::to_string(task.mark_size) +
                                        "-pixel marks; use images of at least 512x512 for marks_cnn");
        return std::make_unique<GeneratedMarks>(task, o.images_per_epoch, o.seed);
    }
    DatasetOptions d;
    const bool dense = m.loss.kind == LossKind::MeanSquaredError;
    std::string task = o.task.empty() ? (dense ? "segmentation" : "classification") : o.task;
    if (task == "classification" && dense)
        throw ModelError("--task classification needs a classifier (softmax cross-entropy loss); model '" + m.name +
                         "' has a dense mse loss: use --task segmentation or another --model");
    if (task == "segmentation" && !dense)
        throw ModelError("--task segmentation needs a model with a dense (mse) loss, like unet; model '" + m.name +
                         "' is a classifier: use --task classification or another --model");
    d.kind = task == "segmentation" ? DatasetKind::Segmentation : DatasetKind::Classification;
    d.classes = dense && m.output_channels() == 1 ? 2 : m.output_channels();
    d.image.channels = m.input_channels;
    return std::make_unique<CsvData>(o.data, d, o.images);
}

// ------------------------------------------------------------------ run folder

struct EpochLog {
    int epoch = 0;  // 1-based
    double loss = 0, accuracy = 0, images_per_second = 0, seconds = 0, lr = 0;
    int64_t peak_working = 0, high_water_mark = 0, peak_checkpoint = 0;
    int64_t peak_device = 0;  // --target cuda; absent from logs of CPU runs
    int64_t skipped_images = 0;  // failed to load (--on-bad-image skip); absent from older logs
};

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

json to_json(const EpochLog &e) {
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

std::string default_run_dir(const std::string &model) {
    const std::time_t t = std::time(nullptr);
    char buf[64];
    std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", std::localtime(&t));
    return "runs/" + fs::path(model).stem().string() + "-" + buf;
}

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
    json log = {{"config", to_json(o)}, {"execution", cache.describe()}, {"epochs_done", epochs.back().epoch}};
    log["epochs"] = json::array();
    for (const auto &e : epochs) log["epochs"].push_back(to_json(e));
    write_file_atomically(staged.path("log.json"), log.dump(2) + "\n");
    staged.commit();
}

// write_run_folder, its failure (a full disk, a folder made read-only)
// said with what the folder still holds.
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

// The one mutable state of a run beyond parameters and optimizer: where it is.
struct RunState {
    int epochs_done = 0;
    std::vector<EpochLog> epochs;
};

// ------------------------------------------------------------------ the loop

void add_into(Tensor &dst, const Tensor &src) {
    float *d = dst.data();
    const float *s = src.data();
    for (int64_t k = 0; k < dst.numel(); k++) d[k] += s[k];
}

// Every numeric option finite and in range, before anything is planned
// or written: a NaN rate would train all epochs at loss nan.
void check_options(const TrainOptions &o) {
    auto refuse = [](const std::string &option, double v, const std::string &want) {
        std::ostringstream s;
        s << option << " " << v << " is not " << want;
        throw std::invalid_argument(s.str());
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
        throw std::invalid_argument("--on-bad-image: '" + o.on_bad_image + "' is not skip or stop");
}

// A step whose loss or gradient is not finite: the run stops before the
// optimizer writes NaN into the weights, and the folder keeps the last epoch saved.
[[noreturn]] void diverged(const std::string &what, int epoch, int64_t step, float lr, int epochs_saved,
                           const std::string &dir) {
    std::ostringstream s;
    s << "training diverged: " << what << " at epoch " << epoch + 1 << ", step " << step + 1 << "; ";
    if (epochs_saved > 0) s << dir << " keeps epoch " << epochs_saved << " (--resume it with a lower --lr)";
    else s << "nothing was saved";
    s << "; try a lower --lr than " << lr;
    throw DivergedError(s.str());
}

// --on-bad-image stop: the image's error, and what the folder still holds.
[[noreturn]] void bad_image_stop(const std::string &error, int epochs_saved, const std::string &dir) {
    if (epochs_saved > 0)
        throw DatasetError(error + "; " + dir + " keeps epoch " + std::to_string(epochs_saved) +
                           " (fix or remove the image, then --resume " + dir + "; or add --on-bad-image skip)");
    throw DatasetError(error + "; nothing was saved (fix or remove the image, or pass --on-bad-image skip)");
}

// One image and what comes with it (prediction; a dense target and its
// mask) live in host memory whole, whatever the cap: a size that cannot fit
// in the machine is refused before planning, not left to the OOM killer.
void check_fits_in_memory(const Model &m, int64_t w, int64_t h, int64_t physical) {
    const TensorShape out = m.shapes((int)w, (int)h)[m.loss.input_id];
    int64_t bytes = w * h * m.input_channels * 4 + out.width * out.height * out.channels * 4;
    if (m.loss.kind == LossKind::MeanSquaredError) bytes += w * h * 4 * (1 + m.output_channels());
    if (physical > 0 && bytes > physical)
        throw std::invalid_argument("images of " + std::to_string(w) + "x" + std::to_string(h) + " need " +
                                    format_bytes(bytes) + " of host memory each (the image, its output and any target "
                                    "as float32), more than this machine's " + format_bytes(physical) +
                                    "; use smaller images (--size for the built-in task)");
}

void run(const TrainOptions &o, const std::string &dir, RunState state, bool resuming, std::ostream &log) {
    check_options(o);
    Model m = load_model(o.model);
    scheduled_lr(o.lr_schedule, o.optimizer.lr, 0, 1, 1);  // checks the name
    std::unique_ptr<SampleSource> source = make_source(o, m);
    MemoryLedger ledger;       // working memory (runtime + kernels) and the checkpoint store
    MemoryLedger data_ledger;  // the images and labels being trained on
    ParamStore params(m, &ledger);
    params.init_pytorch_default(o.seed);
    Optimizer opt(o.optimizer, params, &ledger);
    if (resuming) {
        const auto wmeta = load_parameters(dir + "/weights.safetensors", params);
        const auto ometa = load_optimizer_state(dir + "/optimizer.safetensors", opt, params);
        const std::string want = std::to_string(state.epochs_done);
        if (wmeta.count("epoch") == 0 || wmeta.at("epoch") != want || ometa.count("epoch") == 0 ||
            ometa.at("epoch") != want)
            throw std::invalid_argument(dir + ": weights.safetensors, optimizer.safetensors and log.json are of "
                                              "different epochs (the run was stopped while saving); start a new run");
    }
    ExecutionOptions exec_opt = o.execution;
    exec_opt.optimizer = o.optimizer.kind;
    exec_opt.batch = o.batch;
    ExecutorCache cache(m, o.model, exec_opt, &ledger, log);
    log << "model " << m.name << ": " << params.specs().size() << " parameter tensors; parameters + gradients "
        << format_bytes(params.bytes()) << ", optimizer state " << format_bytes(ledger.current() - params.bytes())
        << "\ndata: " << source->describe() << "\n";
    // Plan and compile for every image size before the first epoch: a cap
    // too small for some image fails here, before anything is written.
    const auto sizes = source->image_sizes();
    for (const auto &[w, h] : sizes) {
        check_fits_in_memory(m, w, h, physical_memory_bytes());
        log << "image size " << w << "x" << h << " (" << format_bytes(w * h * m.input_channels * 4)
            << " as float32, one image at a time): " << cache.describe() << "\n"
            << std::flush;
        SegmentedExecutor &e = cache.for_size(w, h);
        (void)e;
    }
    // Gradients of the batch, summed over its images; sized like the parameters.
    std::vector<Tensor> accum(params.grads.size());
    int64_t accum_bytes = 0;
    for (const auto &g : params.grads) accum_bytes += g.defined() ? g.bytes() : 0;
    log << "gradient accumulator " << format_bytes(accum_bytes) << "\n";
    for (size_t p = 0; p < accum.size(); p++)
        if (params.grads[p].defined()) accum[p] = Tensor(params.grads[p].dims(), &ledger);

    const int64_t n = (int64_t)source->size();
    const int64_t steps_per_epoch = (n + o.batch - 1) / o.batch;
    const int K = m.output_channels();
    log << "training " << o.epochs << " epochs of " << n << " images, batch " << o.batch << " (" << steps_per_epoch
        << " steps per epoch), " << o.optimizer.kind << " lr " << o.optimizer.lr << " (" << o.lr_schedule
        << "), seed " << o.seed << "; run folder " << dir << "\n"
        << std::flush;
    if (resuming) log << "resuming after epoch " << state.epochs_done << "\n";
    int run_here = 0;
    bool traced = o.trace.empty();
    // Images that failed to load (index -> error), skipped without a retry
    // or a second warning in later epochs.
    std::map<size_t, std::string> bad;
    for (int epoch = state.epochs_done; epoch < o.epochs; epoch++) {
        if (o.stop_after > 0 && run_here >= o.stop_after) break;
        ledger.reset_peaks();
        const auto t0 = std::chrono::steady_clock::now();
        const std::vector<size_t> order = source->order(o.seed, epoch);
        ProgressBar bar("epoch " + std::to_string(epoch + 1) + "/" + std::to_string(o.epochs), n, "images");
        double loss_sum = 0, correct = 0, counted = 0;
        int64_t used = 0, skipped = 0;
        float lr = o.optimizer.lr;
        for (int64_t step = 0; step < steps_per_epoch; step++) {
            std::unique_ptr<ChromeTrace> trace;
            if (!traced) {
                trace = std::make_unique<ChromeTrace>();
                ChromeTrace *tr = trace.get();
                cache.set_trace([tr](const ExecutorEvent &ev) {
                    const double dur = std::chrono::duration<double, std::micro>(ev.end - ev.start).count();
                    const double end_ago =
                        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - ev.end).count();
                    TraceArgs args;
                    for (const auto &[k, v] : ev.args) args.emplace_back(k, v);
                    tr->add(ev.name, ev.category, tr->now_us() - end_ago - dur, dur, args);
                });
            }
            for (auto &a : accum)
                if (a.defined()) a.zero();
            const int64_t first = step * o.batch, last = std::min<int64_t>(n, first + o.batch);
            int64_t used_here = 0;
            for (int64_t k = first; k < last; k++) {
                std::optional<ChromeTrace::Span> span;
                if (trace) span.emplace(trace->span("image " + std::to_string(order[k]), "image"));
                Example ex;
                if (!bad.count(order[k])) {
                    try {
                        ex = source->load(order[k], epoch, &data_ledger);
                    } catch (const DatasetError &err) {
                        if (o.on_bad_image == "stop") bad_image_stop(err.what(), state.epochs_done, dir);
                        bad[order[k]] = err.what();
                        bar.finish();
                        log << "warning: skipped " << err.what() << " (--on-bad-image skip: counted in log.json, "
                            << "not retried)\n" << std::flush;
                    }
                }
                if (!ex.image.defined()) {
                    skipped++;
                    bar.update(k + 1);
                    continue;
                }
                const auto &d = ex.image.dims();
                SegmentedExecutor &exec = cache.for_size(d[0], d[1]);
                const TensorShape out = m.shapes(d[0], d[1])[m.loss.input_id];
                Tensor prediction({out.width, out.height, out.channels, 1}, &data_ledger, MemoryLedger::Kind::Data);
                double loss;
                if (ex.mask.defined()) {
                    // Dense target: one-hot classes, or the 0/1 mask itself for a one-channel output.
                    Tensor target = K == 1 ? Tensor(ex.mask.dims(), &data_ledger) : one_hot(ex.mask, K, &data_ledger);
                    if (K == 1)
                        for (int64_t i = 0; i < target.numel(); i++)
                            target.data()[i] = (float)static_cast<const int32_t *>(ex.mask.raw())[i];
                    loss = exec.step(ex.image, target.view(), params, &prediction);
                    const int32_t *mk = static_cast<const int32_t *>(ex.mask.raw());
                    const int64_t plane = out.width * out.height;
                    for (int64_t i = 0; i < plane; i++) {
                        int best = 0;
                        if (K == 1) best = prediction.data()[i] > 0.5f;
                        else
                            for (int c = 1; c < K; c++)
                                if (prediction.data()[c * plane + i] > prediction.data()[best * plane + i]) best = c;
                        correct += best == mk[i];
                    }
                    counted += (double)plane;
                } else {
                    Halide::Runtime::Buffer<int32_t> label(1);  // (1)
                    label(0) = ex.label;
                    loss = exec.step(ex.image, label, params, &prediction);
                    int best = 0;
                    for (int c = 1; c < K; c++)
                        if (prediction.data()[c] > prediction.data()[best]) best = c;
                    correct += best == ex.label;
                    counted += 1;
                }
                if (!std::isfinite(loss))
                    diverged("the loss of " + source->name(order[k]) + " is " + std::to_string(loss), epoch,
                             step, o.optimizer.lr, state.epochs_done, dir);
                loss_sum += loss;
                used++;
                used_here++;
                for (size_t p = 0; p < accum.size(); p++)
                    if (accum[p].defined()) add_into(accum[p], params.grads[p]);
                char extra[64];
                std::snprintf(extra, sizeof extra, "loss %.4f", loss_sum / (double)used);
                bar.update(k + 1, extra);
            }
            // The mean gradient of the batch's images that loaded, then one
            // optimizer step at the scheduled rate (none when every image failed).
            const float inv = 1.0f / (float)std::max<int64_t>(1, used_here);
            for (size_t p = 0; p < accum.size() && used_here > 0; p++)
                if (accum[p].defined()) {
                    float *g = params.grads[p].data();
                    const float *a = accum[p].data();
                    bool finite = true;
                    for (int64_t i = 0; i < accum[p].numel(); i++) {
                        g[i] = a[i] * inv;
                        finite = finite && std::isfinite(g[i]);
                    }
                    if (!finite)
                        diverged("the gradient of " + params.specs()[p].name + " is not finite", epoch, step,
                                 o.optimizer.lr, state.epochs_done, dir);
                }
            lr = scheduled_lr(o.lr_schedule, o.optimizer.lr, (int64_t)epoch * steps_per_epoch + step, steps_per_epoch,
                              o.epochs);
            opt.set_lr(lr);
            if (used_here > 0) {
                std::optional<ChromeTrace::Span> span;
                if (trace) span.emplace(trace->span("optimizer step", "optimizer"));
                opt.step(params);
            }
            if (trace) {
                cache.set_trace({});
                trace->write(o.trace);
                log << "\ntrace of step 1 (" << trace->size() << " events) written to " << o.trace << "\n";
                traced = true;
            }
        }
        bar.finish();
        if (used == 0)
            throw DatasetError("none of the " + std::to_string(n) + " images could be read in epoch " +
                               std::to_string(epoch + 1) + " (" + bad.begin()->second +
                               "); fix or remove them from the CSV");
        EpochLog e;
        e.epoch = epoch + 1;
        e.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        e.loss = loss_sum / (double)used;
        e.accuracy = correct / counted;
        e.images_per_second = (double)used / e.seconds;
        e.skipped_images = skipped;
        e.lr = lr;
        e.peak_working = ledger.peak();
        e.peak_checkpoint = ledger.peak(MemoryLedger::Kind::Checkpoint);
        e.peak_device = ledger.peak(MemoryLedger::Kind::Device);
        e.high_water_mark = process_high_water_mark();
        state.epochs.push_back(e);
        char line[320];
        std::snprintf(line, sizeof line,
                      "epoch %d/%d  loss %.4f  accuracy %5.1f%%  %.2f images/s  %.1f s  peak working memory %s  "
                      "checkpoints %s  high-water mark %s\n",
                      e.epoch, o.epochs, e.loss, 100 * e.accuracy, e.images_per_second, e.seconds,
                      format_bytes(e.peak_working).c_str(), format_bytes(e.peak_checkpoint).c_str(),
                      format_bytes(e.high_water_mark).c_str());
        log << line;
        if (skipped > 0) log << "  skipped " << skipped << " of " << n << " images that failed to load\n";
        if (o.execution.target == "cuda") log << "  peak device memory " << format_bytes(e.peak_device) << "\n";
        log << std::flush;
        save_epoch(dir, o, m, params, opt, state.epochs, cache);
        state.epochs_done = epoch + 1;
        run_here++;
    }
    log << "run folder " << dir << ": weights.safetensors, optimizer.safetensors, log.json, plot.png"
        << (cache.plans().empty() ? "" : ", plan.json") << "\n";
}

// A save that a killed process left half done, finished or undone.
void recover_save(const std::string &dir, std::ostream &log) {
    const Recovery r = recover_staged_files(dir);
    if (r == Recovery::RolledBack) log << dir << ": an unfinished save was undone; resuming from the epoch before it\n";
    if (r == Recovery::RolledForward) log << dir << ": an interrupted save was completed\n";
}

}  // namespace

void train(TrainOptions opt, std::ostream &log) {
    check_options(opt);
    if (opt.run.empty()) opt.run = default_run_dir(opt.model);
    const bool existed = fs::exists(opt.run);
    std::error_code ec;
    fs::create_directories(opt.run, ec);
    if (ec) throw std::invalid_argument("cannot create the run folder '" + opt.run + "': " + ec.message() +
                                        "; pass a writable --run");
    FolderLock lock(opt.run);
    try {
        if (existed) recover_save(opt.run, log);
        if (fs::exists(opt.run + "/log.json"))
            throw std::invalid_argument("run folder '" + opt.run + "' already holds a run; continue it with --resume " +
                                        opt.run + " or pass another --run");
        run(opt, opt.run, RunState{}, false, log);
    } catch (...) {
        // A run that saved nothing leaves nothing behind.
        if (!existed && !fs::exists(opt.run + "/log.json")) lock.remove_folder_if_empty();
        throw;
    }
}

void resume(const std::string &run_dir, const ResumeOptions &changes, std::ostream &log) {
    if (!fs::is_directory(run_dir))
        throw std::invalid_argument(run_dir + ": no such run folder; --resume takes a folder written by "
                                              "`segtile train --run DIR` after at least one epoch");
    FolderLock lock(run_dir);  // before recovery: another process may be saving
    recover_save(run_dir, log);
    std::ifstream f(run_dir + "/log.json");
    if (!f)
        throw std::invalid_argument(run_dir + "/log.json: cannot read it; --resume takes a run folder written by "
                                              "`segtile train --run DIR` after at least one epoch");
    json j;
    try {
        f >> j;
    } catch (const json::exception &e) {
        throw std::invalid_argument(run_dir + "/log.json: not valid JSON (" + e.what() + "); start a new run");
    }
    TrainOptions o;
    RunState state;
    try {
        o = from_json(j.at("config"));
        state.epochs_done = j.at("epochs_done");
        for (const auto &e : j.at("epochs")) state.epochs.push_back(epoch_from_json(e));
    } catch (const json::exception &e) {
        throw std::invalid_argument(run_dir + "/log.json: missing or wrong field (" + e.what() +
                                    "); start a new run");
    }
    if (changes.epochs > 0) o.epochs = changes.epochs;
    o.stop_after = changes.stop_after;
    if (!changes.on_bad_image.empty()) o.on_bad_image = changes.on_bad_image;
    o.run = run_dir;
    if (state.epochs_done >= o.epochs) {
        log << run_dir << " has finished its " << o.epochs << " epochs; pass --epochs N (N > " << state.epochs_done
            << ") to train longer\n";
        return;
    }
    run(o, run_dir, state, true, log);
}

}  // namespace segtile
