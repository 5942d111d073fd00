#include "apps/training_run.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <sstream>

#include "apps/progress_bar.h"
#include "apps/run_folder.h"
#include "apps/sample_source.h"
#include "io/chrome_trace.h"
#include "io/dataset.h"
#include "io/folder_lock.h"
#include "io/weight_file.h"
#include "spec/errors.h"

namespace segtile {

namespace fs = std::filesystem;

float scheduled_lr(const std::string &schedule, float lr, int64_t step, int64_t steps_per_epoch, int epochs) {
    if (schedule == "constant") return lr;
    const int64_t total = std::max<int64_t>(1, steps_per_epoch * epochs);
    if (schedule == "cosine") return (float)(lr * 0.5 * (1 + std::cos(M_PI * (double)step / (double)total)));
    if (schedule == "step") {
        const int64_t epoch = step / std::max<int64_t>(1, steps_per_epoch);
        // Compared without integer division, so that short runs start at lr.
        return lr * (4 * epoch >= 3 * (int64_t)epochs ? 0.01f : 2 * epoch >= (int64_t)epochs ? 0.1f : 1.0f);
    }
    throw UsageError("--lr-schedule: unknown schedule '" + schedule + "'; use constant, cosine or step");
}

namespace {

void add_into(Tensor &dst, const Tensor &src) {
    float *d = dst.data();
    const float *s = src.data();
    for (int64_t k = 0; k < dst.numel(); k++) d[k] += s[k];
}

// A step whose loss or gradient is not finite: the run stops before the
// optimizer writes NaN into the weights, and the folder keeps the last epoch saved.
[[noreturn]] void diverged(const std::string &what, int epoch, int64_t step, const OptimizerConfig &c,
                           int epochs_saved, const std::string &dir) {
    std::ostringstream s;
    s << "training diverged: " << what << " at epoch " << epoch + 1 << ", step " << step + 1 << "; ";
    if (epochs_saved > 0) s << dir << " keeps epoch " << epochs_saved << " (--resume it with a lower --lr)";
    else s << "nothing was saved";
    s << "; try a lower --lr than " << c.lr;
    if (c.weight_decay > 0) s << " or a lower --weight-decay than " << c.weight_decay;
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
        throw DataError("images of " + std::to_string(w) + "x" + std::to_string(h) + " need " +
                                    format_bytes(bytes) + " of host memory each (the image, its output and any target "
                                    "as float32), more than this machine's " + format_bytes(physical) +
                                    "; use smaller images (--size for the built-in task)");
}

// What one image's step gives the epoch's statistics.
struct ImageResult {
    double loss = 0;
    double correct = 0, counted = 0;  // pixels (dense) or images whose arg-max class is right
};

// Forward and backward of one image on the executor for its size; the
// parameters' gradients hold its gradient afterwards.
ImageResult train_image(ExecutorCache &cache, const Model &m, const Example &ex, ParamStore &params,
                        MemoryLedger *data_ledger) {
    const int K = m.output_channels();
    const auto &d = ex.image.dims();
    SegmentedExecutor &exec = cache.for_size(d[0], d[1]);
    const TensorShape out = m.shapes(d[0], d[1])[m.loss.input_id];
    Tensor prediction({out.width, out.height, out.channels, 1}, data_ledger, MemoryLedger::Kind::Data);  // (W', H', K, 1)
    ImageResult r;
    if (ex.mask.defined()) {
        // Dense target: one-hot classes, or the 0/1 mask itself for a one-channel output.
        const int32_t *mk = static_cast<const int32_t *>(ex.mask.raw());
        Tensor target = K == 1 ? Tensor(ex.mask.dims(), data_ledger) : one_hot(ex.mask, K, data_ledger);  // (W, H, K, 1)
        if (K == 1)
            for (int64_t i = 0; i < target.numel(); i++) target.data()[i] = (float)mk[i];
        r.loss = exec.step(ex.image, target.view(), params, &prediction);
        const int64_t plane = out.width * out.height;
        for (int64_t i = 0; i < plane; i++) {
            int best = 0;
            if (K == 1) best = prediction.data()[i] > 0.5f;
            else
                for (int c = 1; c < K; c++)
                    if (prediction.data()[c * plane + i] > prediction.data()[best * plane + i]) best = c;
            r.correct += best == mk[i];
        }
        r.counted = (double)plane;
    } else {
        Halide::Runtime::Buffer<int32_t> label(1);  // (1)
        label(0) = ex.label;
        r.loss = exec.step(ex.image, label, params, &prediction);
        int best = 0;
        for (int c = 1; c < K; c++)
            if (prediction.data()[c] > prediction.data()[best]) best = c;
        r.correct = best == ex.label;
        r.counted = 1;
    }
    return r;
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
            throw DataError(dir + ": weights.safetensors, optimizer.safetensors and log.json are of "
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
                const ImageResult r = train_image(cache, m, ex, params, &data_ledger);
                const double loss = r.loss;
                correct += r.correct;
                counted += r.counted;
                if (!std::isfinite(loss))
                    diverged("the loss of " + source->name(order[k]) + " is " + std::to_string(loss), epoch,
                             step, o.optimizer, state.epochs_done, dir);
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
                                 o.optimizer, state.epochs_done, dir);
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

}  // namespace

void train(TrainOptions opt, std::ostream &log) {
    check_options(opt);
    if (opt.run.empty()) opt.run = default_run_dir(opt.model);
    const bool existed = fs::exists(opt.run);
    std::error_code ec;
    fs::create_directories(opt.run, ec);
    if (ec) throw DataError("cannot create the run folder '" + opt.run + "': " + ec.message() +
                                        "; pass a writable --run");
    FolderLock lock(opt.run);
    try {
        if (existed) recover_save(opt.run, log);
        if (fs::exists(opt.run + "/log.json"))
            throw DataError("run folder '" + opt.run + "' already holds a run; continue it with --resume " +
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
        throw DataError(run_dir + ": no such run folder; --resume takes a folder written by "
                                              "`segtile train --run DIR` after at least one epoch");
    FolderLock lock(run_dir);  // before recovery: another process may be saving
    recover_save(run_dir, log);
    SavedRun saved = read_run_folder(run_dir);
    TrainOptions &o = saved.options;
    RunState &state = saved.state;
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
