#include "apps/executor_cache.h"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iomanip>
#include <regex>
#include <sstream>
#include <stdexcept>

#include "autoscheduler/calibrate.h"
#include "schedules/cpu_schedule.h"
#include "schedules/gpu_schedule.h"
#include "io/atomic_file.h"
#include "spec/environment.h"
#include "runtime/host_threads.h"

#include "generators/jit_kernel.h"
#include "generators/kernel_cache.h"
#include "tiny_cnn_step.h"
#include "tiny_cnn_tiled.h"
#include "spec/errors.h"

namespace segtile {

namespace {

constexpr int kUntiled = -1;  // the cut-set key of the untiled step

// Planning lowers candidate kernels (a minute for the main job on two
// cores); its result depends only on the model, the image size, the caps,
// the optimizer, the batch, the time model's calibration and Halide's
// thread count, so it is kept in
// ~/.cache/segtile/plans (or $SEGTILE_HOME/plans) under a key of those.
std::string plan_cache_path(const Model &m, const std::string &model_arg, const PlanOptions &p) {
    const std::string home = environment::home();
    if (home.empty()) return "";
    const std::string dir = home + "/plans";
    auto text_of = [](const std::string &path) {
        std::ifstream f(path);
        std::stringstream s;
        if (f) s << f.rdbuf();
        return s.str();
    };
    std::string model_text = text_of(model_arg);
    if (model_text.empty()) model_text = text_of(models_dir() + "/" + model_arg + ".json");
    std::ostringstream key;
    key << model_text << '|' << p.width << 'x' << p.height << '|' << p.memory_cap << '|' << p.checkpoint_cap << '|'
        << p.optimizer << '|' << p.batch << '|' << p.estimate << '|' << text_of(calibration_path(p.target == "cuda")) << '|'
        << environment::threads() << "|schedule "
        << kCpuScheduleVersion << "|planner " << kPlannerVersion << (p.target == "cuda" ? "|cuda" : "")
        << (p.image_gradient ? "|image gradient" : "") << (p.mapped_checkpoints ? "|mapped checkpoints" : "");
    std::ostringstream name;
    name << dir << "/" << m.name << "-" << p.width << "x" << p.height << "-" << std::hex
         << std::hash<std::string>{}(key.str()) << ".json";
    return name.str();
}

}  // namespace

std::pair<int, int> parse_size(const std::string &s, const std::string &what) {
    std::smatch m;
    if (!std::regex_match(s, m, std::regex(R"((\d{1,7})x(\d{1,7}))")) || std::stoi(m[1]) == 0 || std::stoi(m[2]) == 0)
        throw UsageError(what + ": expected WIDTHxHEIGHT, e.g. 64x64, got '" + s + "'");
    return {std::stoi(m[1]), std::stoi(m[2])};
}

ExecutorCache::ExecutorCache(const Model &m, const std::string &model_arg, ExecutionOptions opt,
                             MemoryLedger *ledger, std::ostream &log)
    : model_(m), model_arg_(model_arg), opt_(std::move(opt)), ledger_(ledger), log_(log) {
    if (device()) {
        // Before any planning or compiling: Halide initialises CUDA (loads
        // the driver, finds a GPU) or says it cannot.
        if (!cuda_device_usable())
            throw UsageError(
                "--target cuda: no usable CUDA device here (Halide could not load the NVIDIA driver or find a GPU); "
                "drop --target cuda to train on the CPU, or run on a machine with an NVIDIA GPU and its driver "
                "(`segtile plan --target cuda` plans for one without it)");
    }
    // CPU kernels come from the kernel cache where there is one; GPU
    // kernels are JIT-compiled in memory each run.
    // A dump asks for every kernel's statement or assembly: only a compile
    // in memory writes them.
    const bool dumping = !environment::dump_stmt_dir().empty() || !environment::dump_asm_dir().empty();
    if (!device() && !dumping) {
        if (const std::string dir = environment::kernel_cache_dir(); !dir.empty())
            kernel_cache_ = std::make_unique<KernelCache>(dir, &log_);
    }
    if (const std::string v = environment::memory_available(); !v.empty()) {
        try {
            memory_available_ = parse_bytes(v);
        } catch (const std::invalid_argument &e) {
            throw UsageError(std::string("SEGTILE_MEMORY_AVAILABLE: ") + e.what());
        }
    }
    if (!opt_.plan_file.empty()) file_plan_ = read_plan_file(opt_.plan_file, model_);
    if (!opt_.tile.empty()) {
        parse_size(opt_.tile, "--tile");
        parse_cuts(model_, opt_.cuts);  // throws ModelError naming an unknown layer
    }
    if (opt_.memory_cap != "none" && opt_.plan_file.empty() && opt_.tile.empty()) {
        try {
            parse_bytes(opt_.memory_cap);
        } catch (const std::invalid_argument &e) {
            throw UsageError(std::string("--memory-cap: ") + e.what() + " (or 'none' to train untiled)");
        }
    }
}

ExecutorCache::~ExecutorCache() {
    // The executors' mapped checkpoint files go first, then their folder.
    executors_.clear();
    if (!spill_dir_.empty()) {
        std::error_code ec;
        std::filesystem::remove_all(spill_dir_, ec);
    }
}

int64_t ExecutorCache::memory_available() const {
    return memory_available_ > 0 ? memory_available_ : available_memory_bytes();
}

// Half: the working memory, the data and the rest of the system need room too.
bool ExecutorCache::spills(int64_t store_bytes, int64_t available) const {
    return available > 0 && store_bytes > available / 2;
}

std::string ExecutorCache::spill_dir(int64_t store_bytes) {
    const int64_t available = memory_available();
    if (!spills(store_bytes, available)) return "";
    namespace fs = std::filesystem;
    if (spill_dir_.empty()) {
        std::string t = (fs::temp_directory_path() / "segtile-checkpoints-XXXXXX").string();
        if (!mkdtemp(t.data()))
            throw UsageError("the checkpoint store (" + format_bytes(store_bytes) + ") needs more than half of the " +
                             format_bytes(available) + " of memory available, and no folder can be made for it in " +
                             fs::temp_directory_path().string() + ": give --checkpoint-dir DIR on a disk with room");
        spill_dir_ = t;
    }
    std::error_code ec;
    const fs::space_info space = fs::space(spill_dir_, ec);
    if (!ec && (int64_t)space.available < store_bytes)
        throw UsageError("the checkpoint store (" + format_bytes(store_bytes) + ") needs more than half of the " +
                         format_bytes(available) + " of memory available, and " + spill_dir_ + " has only " +
                         format_bytes((int64_t)space.available) + " free: give --checkpoint-dir DIR on a disk with " +
                         format_bytes(store_bytes) + " free");
    log_ << "checkpoint store " << format_bytes(store_bytes) << " is more than half of the " << format_bytes(available)
         << " of memory available: kept in memory-mapped files in " << spill_dir_
         << " (removed at the end; --checkpoint-dir chooses the folder)\n";
    return spill_dir_;
}

std::string ExecutorCache::describe() const {
    if (device()) return describe_host() + ", on the GPU (CUDA)";
    return describe_host();
}

std::string ExecutorCache::describe_host() const {
    if (opt_.untiled()) return "untiled";
    if (!opt_.plan_file.empty()) return "plan file " + opt_.plan_file;
    if (!opt_.tile.empty()) return "cuts '" + opt_.cuts + "', tile " + opt_.tile;
    return "planned for a working-memory cap of " + opt_.memory_cap;
}

void ExecutorCache::set_trace(ExecutorTraceHook hook) {
    trace_ = std::move(hook);
    for (auto &[size, e] : executors_) e->set_trace(trace_);
}

template <typename Make>
auto ExecutorCache::cached(Make make) -> decltype(make()) {
    const KernelCacheCounts before = kernel_cache_->counts();
    const auto start = std::chrono::steady_clock::now();
    auto result = make();
    const KernelCacheCounts after = kernel_cache_->counts();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    log_ << "kernels: " << after.compiled - before.compiled << " compiled, " << after.loaded - before.loaded
         << " loaded from " << kernel_cache_->dir() << " (" << std::fixed << std::setprecision(1) << s << " s)\n"
         << std::defaultfloat << std::flush;
    return result;
}

std::shared_ptr<ModelKernels> ExecutorCache::kernels_for(const std::vector<int> &cuts) {
    auto it = kernels_.find(cuts);
    if (it != kernels_.end()) return it->second;
    auto k = std::make_shared<ModelKernels>();
    const bool tiny = model_.name == "tiny_cnn" && !device();  // its linked libraries are CPU ones
    const Schedule schedule = device() ? Schedule::Gpu : Schedule::Cpu;
    const char *where = device() ? " for CUDA" : "";
    if (!cuts.empty() && cuts[0] == kUntiled) {
        const SegmentLayout layout = untiled_layout(model_, image_gradient());
        if (tiny) {
            k->head = std::make_unique<AotKernel>(kernel_signature(model_, layout, KernelKind::Head, 0),
                                                  tiny_cnn_step_argv, tiny_cnn_step_metadata, ledger_);
        } else if (kernel_cache_) {
            log_ << "preparing the untiled training step of " << model_.name << "...\n" << std::flush;
            k->head = cached([&] { return kernel_cache_->kernel(model_, layout, KernelKind::Head, 0, Halide::Float(32), ledger_); });
        } else {
            log_ << "JIT-compiling the untiled training step of " << model_.name << where << "...\n" << std::flush;
            k->head = std::make_unique<JitKernel>(model_, layout, KernelKind::Head, 0, Halide::Float(32), ledger_,
                                                  std::set<std::string>{}, schedule);
        }
    } else if (tiny && cuts == parse_cuts(model_, tiny_cnn_tiled_cuts())) {
        *k = tiny_cnn_tiled_kernels(model_, ledger_);
    } else {
        const SegmentLayout layout = make_segments(model_, cuts, image_gradient());
        if (kernel_cache_) {
            log_ << "preparing " << 2 * layout.segments.size() + 1 << " kernels of " << model_.name
                 << " for these cuts...\n"
                 << std::flush;
            *k = cached([&] {
                return kernel_cache_->model_kernels(model_, layout, Halide::Float(32), ledger_, environment::threads());
            });
        } else {
            log_ << "JIT-compiling " << 2 * layout.segments.size() + 1 << " kernels of " << model_.name << where
                 << " for these cuts (a minute or two for a small model)...\n"
                 << std::flush;
            *k = jit_model_kernels(model_, layout, Halide::Float(32), ledger_, schedule);
        }
    }
    kernels_[cuts] = k;
    return k;
}

// The plan for one image size, from the plan cache or made (and cached).
Plan ExecutorCache::plan_at(int64_t width, int64_t height, bool mapped) {
    PlanOptions p;
    p.width = width;
    p.height = height;
    p.batch = opt_.batch;
    p.memory_cap = opt_.memory_cap;
    p.optimizer = opt_.optimizer;
    p.estimate = opt_.estimate;
    p.target = opt_.target;
    p.image_gradient = image_gradient();
    p.mapped_checkpoints = mapped;
    const std::string cached = plan_cache_path(model_, model_arg_, p);
    std::optional<Plan> plan;
    if (!cached.empty() && std::filesystem::exists(cached)) {
        try {
            plan = read_plan_file(cached, model_);
            log_ << "plan for " << width << "x" << height << " under " << opt_.memory_cap << " from " << cached
                 << "\n";
        } catch (const std::exception &) {
            plan.reset();  // unreadable: plan again, and replace it
        }
    }
    if (!plan) {
        plan = plan_for(model_, p);
        if (!cached.empty()) {
            std::error_code ec;
            std::filesystem::create_directories(std::filesystem::path(cached).parent_path(), ec);
            try {
                write_file_atomically(cached, plan_to_json(*plan));
            } catch (const std::exception &e) {
                log_ << "(could not cache the plan: " << e.what() << ")\n";
            }
        }
    }
    return std::move(*plan);
}

SegmentedExecutor &ExecutorCache::for_size(int64_t width, int64_t height) {
    const auto key = std::make_pair(width, height);
    auto it = executors_.find(key);
    if (it != executors_.end()) return *it->second;
    model_.shapes(width, height);  // throws ModelError if the image is too small for the network
    std::vector<int> cuts;
    std::vector<TileSize> tiles;
    SegmentLayout layout;
    if (opt_.untiled()) {
        cuts = {kUntiled};
        layout = untiled_layout(model_, image_gradient());
    } else {
        if (file_plan_) {
            cuts = file_plan_->cuts;
            tiles = file_plan_->tile_sizes();
        } else if (!opt_.tile.empty()) {
            cuts = parse_cuts(model_, opt_.cuts);
            const auto [tw, th] = parse_size(opt_.tile, "--tile");
            tiles.assign(make_segments(model_, cuts).segments.size(), TileSize{tw, th});
        } else {
            // With mapped checkpoints the cap holds the pages each row of
            // tiles faults in, too: with --checkpoint-dir, or where the
            // store planned in memory would not fit there (spill_dir).
            const bool named = !opt_.checkpoint_dir.empty() && !device();
            Plan plan = plan_at(width, height, named);
            if (!named && !device() &&
                spills(checkpoint_store_bytes(model_, make_segments(model_, plan.cuts, image_gradient()), width, height,
                                              halide_type_of<float>()),
                       memory_available())) {
                log_ << "the checkpoint store would not fit in memory: planning again with its pages in "
                        "memory-mapped files counted against the cap\n";
                plan = plan_at(width, height, true);
            }
            log_ << plan_table(plan, model_);
            cuts = plan.cuts;
            tiles = plan.tile_sizes();
            plans_[key] = std::move(plan);
        }
        layout = make_segments(model_, cuts, image_gradient());
    }
    std::string checkpoint_dir = opt_.checkpoint_dir;
    if (checkpoint_dir.empty() && !device())
        checkpoint_dir = spill_dir(checkpoint_store_bytes(model_, layout, width, height, halide_type_of<float>()));
    auto exec = std::make_unique<SegmentedExecutor>(model_, layout, share_kernels(kernels_for(cuts)), tiles, ledger_,
                                                    halide_type_of<float>(), checkpoint_dir);
    exec->set_trace(trace_);
    // One pool of host threads for every size: an executor per size, each
    // with its own, left a thread per core asleep per size a dataset holds.
    if (!host_threads_) host_threads_ = HostThreads::for_this_machine();
    exec->set_host_threads(host_threads_);
    // On a GPU the planned cap is the device's, and the executor enforces it.
    if (device()) {
        int64_t cap = 0;
        if (plans_.count(key)) cap = plans_.at(key).memory_cap;
        else if (file_plan_ && file_plan_->device) cap = file_plan_->memory_cap;
        exec->set_device(true, cap);
    }
    return *(executors_[key] = std::move(exec));
}

}  // namespace segtile
