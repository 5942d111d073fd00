// Registers the "Segtile" autoscheduler when libautoschedule_segtile.so is
// loaded (generator -p, Halide::load_plugin). Parameters:
//   memory_cap   bytes of Halide allocations alive at once (default: none)
//   parallelism  threads that run tiles at once (default 16)
//   cache_bytes  per-thread working set that stays in cache (default 1 MiB)
#include <sstream>
#include <string>

#include "Halide.h"
#include "autoscheduler/plugin/apply_plan.h"
#include "autoscheduler/plugin/tile_search.h"

namespace segtile::plugin {

namespace {

int64_t parse_integer(const std::string &key, const std::string &value, int64_t least) {
    std::istringstream in(value);
    int64_t v = 0;
    in >> v;
    if (in.fail() || !in.eof() || v < least) {
        throw Halide::CompileError("Segtile: autoscheduler." + key + "=" + value + " is not an integer >= " +
                                   std::to_string(least));
    }
    return v;
}

SearchOptions parse_options(const Halide::AutoschedulerParams &params) {
    SearchOptions o;
    for (const auto &[key, value] : params.extra) {
        if (key == "memory_cap") o.memory_cap = parse_integer(key, value, 1);
        else if (key == "parallelism") o.parallelism = static_cast<int>(parse_integer(key, value, 1));
        else if (key == "cache_bytes") o.cache_bytes = parse_integer(key, value, 1);
        else throw Halide::CompileError("Segtile: unknown autoscheduler parameter " + key +
                                        " (known: memory_cap, parallelism, cache_bytes)");
    }
    return o;
}

struct SegtileAutoscheduler {
    void operator()(const Halide::Pipeline &pipeline, const Halide::Target &target,
                    const Halide::AutoschedulerParams &params, Halide::AutoSchedulerResults *results) const {
        const SearchOptions options = parse_options(params);
        if (target.has_gpu_feature()) {
            throw Halide::CompileError("Segtile: GPU targets are not supported yet; use a CPU target.");
        }
        std::vector<Halide::Internal::Function> outputs;
        for (const Halide::Func &f : pipeline.outputs()) outputs.push_back(f.function());
        const PipelineGraph graph(outputs, target);
        const SearchResult result = search_plan(graph, options);
        std::ostringstream src;
        src << "// Segtile: " << result.plan.groups.size() << " root groups, predicted peak "
            << result.memory.peak << " bytes of live allocations\n";
        src << apply_plan(graph, result.plan);
        if (results) {
            results->target = target;
            results->autoscheduler_params = params;
            results->schedule_source = src.str();
        }
    }
};

// The plugin API's registration hook: runs once, when the library loads.
struct Registration {
    Registration() { Halide::Pipeline::add_autoscheduler("Segtile", SegtileAutoscheduler()); }
};
const Registration registration;

}  // namespace

}  // namespace segtile::plugin
