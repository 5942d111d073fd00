// Executors for the image sizes a run meets: one plan per distinct size
// (planned from the memory cap, read from a plan file, or given by hand),
// kernels compiled once per cut set and shared by every size that plans
// the same cuts (AOT libraries where one matches, JIT otherwise).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "apps/planning.h"
#include "autoscheduler/plan.h"
#include "runtime/executor.h"

namespace segtile {

struct ExecutionOptions {
    std::string memory_cap;      // plan for it ("256MiB"); "none": untiled
    std::string plan_file;       // or run this plan (from `segtile plan --json`)
    std::string cuts, tile;      // or these cuts and this tile (WxH) in every segment
    std::string checkpoint_dir;  // "": in memory, or in temporary files where they would not fit (spill_dir)
    bool estimate = false;       // plan with the analytic kernel-memory estimate only
    std::string optimizer = "adam";
    int batch = 1;
    std::string target = "cpu";  // "cuda": GPU kernels, memory_cap caps device memory
    bool untiled() const { return memory_cap == "none" && plan_file.empty() && tile.empty(); }
};

class KernelCache;

class ExecutorCache {
public:
    // model_arg: the --model given (a shipped name or a file), to key cached plans by its text.
    ExecutorCache(const Model &m, const std::string &model_arg, ExecutionOptions opt, MemoryLedger *ledger,
                  std::ostream &log);
    ~ExecutorCache();

    // The executor for images of this size; plans and compiles on first use.
    // Throws PlanError (cap too small), ModelError.
    SegmentedExecutor &for_size(int64_t width, int64_t height);

    // Plans made so far, by size (untiled and hand-given runs have none).
    const std::map<std::pair<int64_t, int64_t>, Plan> &plans() const { return plans_; }
    // "untiled", "planned for 256MiB", "plan file p.json", "cuts pool1 tile 16x16"; ", on the GPU (CUDA)"
    std::string describe() const;
    // Every executor (present and future) reports to `hook` (empty: none).
    void set_trace(ExecutorTraceHook hook);

private:
    std::shared_ptr<ModelKernels> kernels_for(const std::vector<int> &cuts);
    // Runs `make` (kernels from the cache) and logs what it compiled and loaded.
    template <typename Make>
    auto cached(Make make) -> decltype(make());
    bool device() const { return opt_.target == "cuda"; }
    // Training needs no image gradient; tiny_cnn's linked CPU libraries
    // give it, so all its kernels and plans do, alike.
    bool image_gradient() const { return model_.name == "tiny_cnn" && !device(); }
    std::string describe_host() const;
    // Where the checkpoints go when no --checkpoint-dir is given: "" (memory)
    // unless the store takes more than half of the memory available; then a
    // temporary folder of memory-mapped files, made once (spill_dir_).
    std::string spill_dir(int64_t store_bytes);
    int64_t memory_available() const;  // SEGTILE_MEMORY_AVAILABLE, else the system's
    bool spills(int64_t store_bytes, int64_t available) const;  // spill_dir would give a folder
    // The plan for one size (from $SEGTILE_HOME/plans, or made and cached
    // there); `mapped`: the checkpoints are in memory-mapped files.
    Plan plan_at(int64_t width, int64_t height, bool mapped);

    Model model_;
    std::string model_arg_;
    ExecutionOptions opt_;
    MemoryLedger *ledger_;
    std::ostream &log_;
    std::optional<Plan> file_plan_;
    std::map<std::vector<int>, std::shared_ptr<ModelKernels>> kernels_;  // by cut set
    std::map<std::pair<int64_t, int64_t>, Plan> plans_;
    std::map<std::pair<int64_t, int64_t>, std::unique_ptr<SegmentedExecutor>> executors_;
    ExecutorTraceHook trace_;
    std::shared_ptr<HostThreads> host_threads_;
    std::string spill_dir_;                      // "" until checkpoints spill
    int64_t memory_available_ = 0;               // SEGTILE_MEMORY_AVAILABLE; 0: the system's
    std::unique_ptr<KernelCache> kernel_cache_;  // null: no cache (SEGTILE_KERNEL_CACHE=off, GPU kernels)  // shared by the executors (they run one at a time)
};

// "64x64" -> {64, 64}; throws std::invalid_argument naming `what`.
std::pair<int, int> parse_size(const std::string &s, const std::string &what);

}  // namespace segtile
