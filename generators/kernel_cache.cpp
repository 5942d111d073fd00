#include "generators/kernel_cache.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <optional>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "generators/jit_kernel.h"
#include "generators/kernel_pipeline.h"
#include "io/atomic_file.h"
#include "kernel_fingerprint.h"
#include "runtime/kernel_library.h"
#include "schedules/cpu_schedule.h"
#include "spec/environment.h"
#include "spec/kernel_error.h"

extern char **environ;

namespace segtile {

namespace fs = std::filesystem;

namespace {

constexpr const char *kEntryFormat = "segtile kernel cache entry 1";

// FNV-1a, 64 bits: the key's file name and the library's content check (the
// manifest holds the whole key, so a name collision is a miss, not a bug).
uint64_t fnv1a(const void *data, size_t n, uint64_t h = 1469598103934665603ull) {
    const auto *p = static_cast<const unsigned char *>(data);
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

std::string hex(uint64_t v) {
    std::ostringstream s;
    s << std::hex << std::setw(16) << std::setfill('0') << v;
    return s.str();
}

std::string read_file(const std::string &path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) return "";
    std::ostringstream s;
    s << f.rdbuf();
    return s.str();
}

std::string kernel_stem(const Model &m, KernelKind kind, int segment) {
    const std::string k = kind == KernelKind::Head      ? "head"
                          : kind == KernelKind::Forward ? "segment" + std::to_string(segment) + "-forward"
                                                        : "segment" + std::to_string(segment) + "-backward";
    return c_identifier(m.name) + "-" + k;
}

// The target kernels are compiled for: the JIT's (what schedule_cpu is
// given in JitKernel too), as an object with a user context and no runtime.
Halide::Target kernel_target() {
    return Halide::get_jit_target_from_environment()
        .without_feature(Halide::Target::JIT)
        .with_feature(Halide::Target::UserContext)
        .with_feature(Halide::Target::NoRuntime);
}

struct Manifest {
    std::string key, library, function, hash;
    uint64_t bytes = 0;
};

// Null when the manifest is absent; throws when it is unreadable.
std::optional<Manifest> read_manifest(const std::string &path) {
    std::error_code ec;
    if (!fs::exists(path, ec)) return std::nullopt;
    const nlohmann::json j = nlohmann::json::parse(read_file(path));
    if (j.at("format").get<std::string>() != kEntryFormat) throw std::runtime_error("another format");
    return Manifest{j.at("key").get<std::string>(), j.at("library").get<std::string>(),
                    j.at("function").get<std::string>(), j.at("content_fnv1a64").get<std::string>(),
                    j.at("bytes").get<uint64_t>()};
}

// Empty when the library matches the manifest, else what is wrong.
std::string check_library(const std::string &path, const Manifest &mf) {
    const std::string bytes = read_file(path);
    if (bytes.empty()) return "its library " + path + " is missing or empty";
    if (bytes.size() != mf.bytes)
        return "its library has " + std::to_string(bytes.size()) + " bytes, the manifest says " +
               std::to_string(mf.bytes);
    if (hex(fnv1a(bytes.data(), bytes.size())) != mf.hash) return "its library's content hash differs";
    return "";
}

// Moves `library_tmp` (a finished file in the cache folder) into place,
// under its content hash (or as `stem`.so: the runtime, which kernels name),
// then writes the manifest: the commit point. Returns the library's path.
std::string store_entry(const std::string &dir, const std::string &stem, const std::string &library_tmp,
                        const std::string &key, const std::string &function, double seconds, bool by_hash) {
    const std::string bytes = read_file(library_tmp);
    const std::string hash = hex(fnv1a(bytes.data(), bytes.size()));
    const std::string name = by_hash ? stem + "-" + hash + ".so" : stem + ".so";
    fs::rename(library_tmp, fs::path(dir) / name);
    nlohmann::json j = {{"format", kEntryFormat}, {"key", key},            {"library", name},
                        {"function", function},   {"bytes", bytes.size()}, {"content_fnv1a64", hash},
                        {"compile_seconds", seconds}};
    write_file_atomically((fs::path(dir) / (stem + ".json")).string(), j.dump(1) + "\n");
    return (fs::path(dir) / name).string();
}

// A folder for one compile's temporary files, inside the cache folder (so
// the finished library is renamed, not copied), removed when done.
class ScratchDir {
public:
    explicit ScratchDir(const std::string &dir) {
        fs::create_directories(dir);
        std::string t = (fs::path(dir) / ".tmp-XXXXXX").string();
        if (!mkdtemp(t.data())) throw std::runtime_error("cannot create a temporary folder in " + dir);
        path_ = t;
    }
    ~ScratchDir() {
        std::error_code ec;
        fs::remove_all(path_, ec);
    }
    std::string file(const std::string &name) const { return (fs::path(path_) / name).string(); }

private:
    std::string path_;
};

}  // namespace

std::string kernel_cache_key(const Model &m, const SegmentLayout &layout, KernelKind kind, int segment,
                             Halide::Type t, const Halide::Target &target) {
    std::ostringstream k;
    k << "segtile sources " << SEGTILE_KERNEL_FINGERPRINT << "; cpu schedule " << kCpuScheduleVersion << "; Halide "
      << HALIDE_VERSION_MAJOR << "." << HALIDE_VERSION_MINOR << "." << HALIDE_VERSION_PATCH << "; target "
      << target.to_string() << "; HL_LLVM_ARGS '" << environment::llvm_args() << "'\n";
    k << "model " << m.name << " input_channels " << m.input_channels << " loss " << to_string(m.loss.kind) << " "
      << m.loss.input_id << "\n";
    for (const Layer &l : m.layers) {
        k << "layer " << l.name << " " << to_string(l.kind) << " prefix " << l.param_prefix << " inputs";
        for (int i : l.input_ids) k << " " << i;
        k << " | " << l.out_channels << " " << l.kernel << " " << l.stride << " " << l.padding << " " << l.dilation
          << " " << l.groups << " " << l.bias << " " << std::setprecision(17) << l.negative_slope << " " << l.eps
          << " " << l.factor << " " << l.out_features << " " << l.in_features << " " << l.output_padding << " | "
          << l.in_channels << " " << l.channels << "\n";
    }
    k << "layout cuts";
    for (int c : layout.cuts) k << " " << c;
    k << " head " << layout.head_first << " reads";
    for (int i : layout.head_inputs) k << " " << i;
    k << " image_gradient " << layout.image_gradient << "\n";
    for (const SegmentSpec &s : layout.segments) {
        k << "segment " << s.first << ".." << s.last << " in";
        for (int i : s.inputs) k << " " << i;
        k << " out";
        for (int o : s.outputs) k << " " << o;
        k << "\n";
    }
    k << "kernel " << (kind == KernelKind::Head ? "head" : kind == KernelKind::Forward ? "forward" : "backward") << " "
      << segment << " type " << t << "\n";
    return k.str();
}

std::string KernelCache::default_linker() { return SEGTILE_KERNEL_LINKER; }

KernelCache::KernelCache(std::string dir, std::ostream *log, std::string linker)
    : dir_(std::move(dir)), linker_(std::move(linker)), log_(log) {}

KernelCacheCounts KernelCache::counts() const {
    return {compiled_.load(), loaded_.load(), rejected_.load(), in_memory_.load()};
}

std::string KernelCache::summary() const {
    const KernelCacheCounts c = counts();
    std::ostringstream s;
    s << c.compiled << " compiled, " << c.loaded << " loaded from " << dir_;
    if (c.rejected) s << " (" << c.rejected << " broken entries compiled again)";
    if (c.in_memory) s << " (" << c.in_memory << " kept in memory only: linking failed)";
    return s.str();
}

void KernelCache::warn(const std::string &line) {
    std::lock_guard<std::mutex> lock(log_mutex_);
    if (log_) *log_ << "kernel cache: " << line << "\n" << std::flush;
}

bool KernelCache::link(const std::string &object, const std::string &library, const std::vector<std::string> &extra,
                       std::string *why) {
    std::vector<std::string> argv = {linker_, "-shared", "-o", library, object};
    argv.insert(argv.end(), extra.begin(), extra.end());
    std::vector<char *> cargv;
    for (auto &a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    // The linker's words go to a file beside the library, for the message.
    const std::string err = library + ".stderr";
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid = 0;
    const int rc = posix_spawnp(&pid, linker_.c_str(), &actions, nullptr, cargv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) {
        *why = "cannot run the linker '" + linker_ + "': " + std::strerror(rc);
        return false;
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return true;
    *why = "'" + linker_ + " -shared' failed: " + read_file(err);
    return false;
}

std::string KernelCache::runtime_library(const Halide::Target &target) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!runtime_.empty() || !link_failed_.empty()) return runtime_;
    const Halide::Target rt = target.without_feature(Halide::Target::NoRuntime);
    const std::string key = "Halide runtime " + std::to_string(HALIDE_VERSION_MAJOR) + "." +
                            std::to_string(HALIDE_VERSION_MINOR) + "." + std::to_string(HALIDE_VERSION_PATCH) +
                            " for " + rt.to_string();
    const std::string stem = "halide-runtime-" + hex(fnv1a(key.data(), key.size()));
    const std::string manifest = (fs::path(dir_) / (stem + ".json")).string();
    try {
        if (auto mf = read_manifest(manifest); mf && mf->key == key) {
            const std::string lib = (fs::path(dir_) / mf->library).string();
            if (check_library(lib, *mf).empty()) return runtime_ = lib;
        }
    } catch (const std::exception &) {
        // An unreadable manifest: build the runtime again below.
    }
    try {
        ScratchDir scratch(dir_);
        Halide::compile_standalone_runtime(scratch.file("runtime.o"), rt);
        // Kernel libraries name the runtime by its soname (DT_NEEDED) and
        // find it beside themselves ($ORIGIN), so it keeps that file name.
        const std::string tmp = scratch.file("runtime.so");
        std::string why;
        if (!link(scratch.file("runtime.o"), tmp, {"-Wl,-soname," + stem + ".so"}, &why)) {
            link_failed_ = why;
            return "";
        }
        return runtime_ = store_entry(dir_, stem, tmp, key, "", 0, false);
    } catch (const std::exception &e) {
        link_failed_ = "cannot store kernels in " + dir_ + " (" + e.what() + ")";
        return "";
    }
}

std::unique_ptr<Kernel> KernelCache::kernel(const Model &m, const SegmentLayout &layout, KernelKind kind,
                                            int segment, Halide::Type t, MemoryLedger *ledger) {
    bool compiled = false;
    return prepare(m, layout, kind, segment, t, ledger, &compiled);
}

std::unique_ptr<Kernel> KernelCache::prepare(const Model &m, const SegmentLayout &layout, KernelKind kind,
                                             int segment, Halide::Type t, MemoryLedger *ledger, bool *compiled) {
    const Halide::Target target = kernel_target();
    const std::string key = kernel_cache_key(m, layout, kind, segment, t, target);
    const std::string key_hash = hex(fnv1a(key.data(), key.size()));
    const std::string stem = kernel_stem(m, kind, segment) + "-" + key_hash;
    const std::string manifest = (fs::path(dir_) / (stem + ".json")).string();
    // In kernel_pipeline's order (the library's arguments): inputs, then outputs.
    std::vector<KernelArg> signature;
    for (bool outputs : {false, true})
        for (const KernelArg &a : kernel_signature(m, layout, kind, segment))
            if (a.output == outputs) signature.push_back(a);
    try {
        if (auto mf = read_manifest(manifest); mf && mf->key == key) {
            const std::string lib = (fs::path(dir_) / mf->library).string();
            if (const std::string bad = check_library(lib, *mf); !bad.empty()) {
                warn("entry " + manifest + " is broken (" + bad + "); compiling it again");
                rejected_++;
            } else if (!runtime_library(target).empty()) {
                auto k = load_library_kernel(lib, mf->function, signature, ledger);
                loaded_++;
                return k;
            }
        }
    } catch (const std::exception &e) {
        warn("entry " + manifest + " does not load (" + e.what() + "); compiling it again");
        rejected_++;
    }
    compiled_++;
    *compiled = true;
    if (const std::string runtime = runtime_library(target); !runtime.empty()) {
        try {
            return compile_and_store(m, layout, kind, segment, t, ledger, key, stem, runtime, signature);
        } catch (const KernelError &) {
            throw;
        } catch (const std::exception &e) {
            std::lock_guard<std::mutex> lock(mutex_);
            if (link_failed_.empty()) link_failed_ = "cannot store kernels in " + dir_ + " (" + e.what() + ")";
        }
    }
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!link_warned_) warn(link_failed_ + "; kernels are compiled in memory and not kept");
        link_warned_ = true;
    }
    in_memory_++;
    return std::make_unique<JitKernel>(m, layout, kind, segment, t, ledger);
}

std::unique_ptr<Kernel> KernelCache::compile_and_store(const Model &m, const SegmentLayout &layout, KernelKind kind,
                                                       int segment, Halide::Type t, MemoryLedger *ledger,
                                                       const std::string &key, const std::string &stem,
                                                       const std::string &runtime,
                                                       const std::vector<KernelArg> &signature) {
    const auto start = std::chrono::steady_clock::now();
    const std::string what = kernel_description(m, layout, kind, segment);
    const std::string function = "segtile_" + stem.substr(stem.size() - 16);
    ScratchDir scratch(dir_);
    try {
        KernelPipeline kp = kernel_pipeline(m, layout, kind, segment, t);
        schedule_cpu(kp.outputs, Halide::get_jit_target_from_environment());
        Halide::Pipeline(kp.outputs).compile_to_object(scratch.file("kernel.o"), kp.args, function, kernel_target());
    } catch (const Halide::Error &e) {
        throw KernelError("compiling " + what + ": Halide: " + e.what());
    }
    std::string why;
    const std::string tmp = scratch.file("kernel.so");
    if (!link(scratch.file("kernel.o"), tmp, {runtime, "-Wl,-rpath,$ORIGIN"}, &why)) throw std::runtime_error(why);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::string lib = store_entry(dir_, stem, tmp, key, function, seconds, true);
    return load_library_kernel(lib, function, signature, ledger);
}

ModelKernels KernelCache::model_kernels(const Model &m, const SegmentLayout &layout, Halide::Type t,
                                        MemoryLedger *ledger, int threads) {
    struct Job {
        KernelKind kind;
        int segment;
        std::unique_ptr<Kernel> kernel;
        std::exception_ptr error;
    };
    std::vector<Job> jobs;
    for (size_t s = 0; s < layout.segments.size(); s++) {
        jobs.push_back({KernelKind::Forward, (int)s, nullptr, nullptr});
        jobs.push_back({KernelKind::Backward, (int)s, nullptr, nullptr});
    }
    jobs.push_back({KernelKind::Head, 0, nullptr, nullptr});
    // Independent kernels compile side by side (Halide's compiler is
    // thread-safe for pipelines that share no Exprs).
    std::atomic<size_t> next{0};
    // A cold compile of a deep model takes minutes: a line per kernel
    // compiled says how far it is.
    std::atomic<int> done{0};
    auto work = [&] {
        for (size_t i; (i = next++) < jobs.size();) {
            try {
                bool compiled = false;
                const auto start = std::chrono::steady_clock::now();
                jobs[i].kernel = prepare(m, layout, jobs[i].kind, jobs[i].segment, t, ledger, &compiled);
                const int ready = ++done;
                if (compiled) {
                    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
                    std::ostringstream line;
                    line << "compiled " << kernel_description(m, layout, jobs[i].kind, jobs[i].segment) << " in "
                         << std::fixed << std::setprecision(1) << s << " s (" << ready << " of " << jobs.size()
                         << " kernels ready)";
                    warn(line.str());
                }
            } catch (...) {
                jobs[i].error = std::current_exception();
            }
        }
    };
    std::vector<std::thread> pool;
    for (int i = 1; i < std::min<int>(threads, (int)jobs.size()); i++) pool.emplace_back(work);
    work();
    for (auto &th : pool) th.join();
    ModelKernels k;
    for (auto &j : jobs) {
        if (j.error) std::rethrow_exception(j.error);
        if (j.kind == KernelKind::Forward) k.forward.push_back(std::move(j.kernel));
        else if (j.kind == KernelKind::Backward) k.backward.push_back(std::move(j.kernel));
        else k.head = std::move(j.kernel);
    }
    return k;
}

}  // namespace segtile
